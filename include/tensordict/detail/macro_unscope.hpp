// Undefines what detail/macro_scope.hpp defined (no include guard: see there).
#undef TENSORDICT_INLINE
