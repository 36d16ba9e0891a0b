// (No include guard: each header that expands the list includes it after its other includes
// and undefines the macros when done, so that none is left in a user's translation unit.)
/// \file
/// The one dtype table of the library, used by every format: Python's name (as reprs,
/// `meta.json` and, without `torch.`, DCP's `.metadata` spell it), the element size in bytes,
/// libtorch's `c10::ScalarType` enumerator, the `torch.save` storage class (`Float` for
/// `torch.FloatStorage`; empty where torch.save has none this reader takes) and safetensors'
/// name. Free of libtorch headers: the parsers (fuzzed alone) expand it without the enumerators,
/// the libtorch side (`dtype.hpp`, the checkpoint formats) with them.
///
/// `X(python_name, itemsize, ScalarType, storage, safetensors)`. The unsigned types past uint8
/// exist in libtorch 2.3 and later, and the float8 types only as safetensors reads them:
/// `TENSORDICT_DTYPES_UINT` and `TENSORDICT_DTYPES_FLOAT8` list them apart, so that the libtorch
/// side expands them only where they exist.

#define TENSORDICT_DTYPES(X)                                      \
  X("torch.bool", 1, Bool, "Bool", "BOOL")                        \
  X("torch.uint8", 1, Byte, "Byte", "U8")                         \
  X("torch.int8", 1, Char, "Char", "I8")                          \
  X("torch.int16", 2, Short, "Short", "I16")                      \
  X("torch.int32", 4, Int, "Int", "I32")                          \
  X("torch.int64", 8, Long, "Long", "I64")                        \
  X("torch.float16", 2, Half, "Half", "F16")                      \
  X("torch.bfloat16", 2, BFloat16, "BFloat16", "BF16")            \
  X("torch.float32", 4, Float, "Float", "F32")                    \
  X("torch.float64", 8, Double, "Double", "F64")                  \
  X("torch.complex64", 8, ComplexFloat, "ComplexFloat", "C64")    \
  X("torch.complex128", 16, ComplexDouble, "ComplexDouble", "")

#define TENSORDICT_DTYPES_UINT(X)                                 \
  X("torch.uint16", 2, UInt16, "", "U16")                         \
  X("torch.uint32", 4, UInt32, "", "U32")                         \
  X("torch.uint64", 8, UInt64, "", "U64")

#define TENSORDICT_DTYPES_FLOAT8(X)                               \
  X("torch.float8_e4m3fn", 1, Float8_e4m3fn, "", "F8_E4M3")       \
  X("torch.float8_e5m2", 1, Float8_e5m2, "", "F8_E5M2")           \
  X("torch.float8_e4m3fnuz", 1, Float8_e4m3fnuz, "", "F8_E4M3FNUZ") \
  X("torch.float8_e5m2fnuz", 1, Float8_e5m2fnuz, "", "F8_E5M2FNUZ")
