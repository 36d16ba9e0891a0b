// (No include guard: each header that expands the list includes it after its other includes
// and undefines both macros when done, so that neither is left in a user's translation unit.)
/// \file
/// The dtypes of the library, written once: Python's name (as reprs and `meta.json` spell it),
/// the element size in bytes, and libtorch's `c10::ScalarType` enumerator. Free of libtorch
/// headers: the meta.json parser (fuzzed alone) expands it without the enumerators, the
/// libtorch side (`dtype.hpp`) with them.
///
/// `X(python_name, itemsize, ScalarType)`. The unsigned types past uint8 exist in libtorch 2.3
/// and later; `TENSORDICT_DTYPES_UINT` lists them apart so that the libtorch side expands it only
/// where they exist.

#define TENSORDICT_DTYPES(X)                   \
  X("torch.bool", 1, Bool)                     \
  X("torch.uint8", 1, Byte)                    \
  X("torch.int8", 1, Char)                     \
  X("torch.int16", 2, Short)                   \
  X("torch.int32", 4, Int)                     \
  X("torch.int64", 8, Long)                    \
  X("torch.float16", 2, Half)                  \
  X("torch.bfloat16", 2, BFloat16)             \
  X("torch.float32", 4, Float)                 \
  X("torch.float64", 8, Double)                \
  X("torch.complex64", 8, ComplexFloat)        \
  X("torch.complex128", 16, ComplexDouble)

#define TENSORDICT_DTYPES_UINT(X)              \
  X("torch.uint16", 2, UInt16)                 \
  X("torch.uint32", 4, UInt32)                 \
  X("torch.uint64", 8, UInt64)
