// Undefines what detail/macros.hpp defined (no include guard: see there).
#undef TENSORDICT_EACH
#undef TENSORDICT_EACH_
#undef TENSORDICT_MODERN_FOREACH
