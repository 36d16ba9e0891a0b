// The library's internal macros, defined for its own headers only. Every header that uses one
// includes this file after all its other includes and detail/macro_unscope.hpp at its end, so
// no internal macro is left defined in a user's translation unit. (No include guard: each
// header that needs the macros defines them again after the previous one undefined them.)

// Traversal steps that must vanish into their caller: the compiler then sees every slot's
// current value (an empty tensor in a fresh tree needs no release when overwritten).
#define TENSORDICT_INLINE [[gnu::always_inline]] inline
