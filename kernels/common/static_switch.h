// Compile-time dispatch: the one way pyg_tc turns a runtime value into a
// template argument (after FlashAttention's static_switch.h). Every switch
// takes the runtime value, the name under which the body sees it as a
// compile-time constant (or type), and the body as a lambda:
//
//   PYG_TC_BOOL_SWITCH(p.vec, VEC, [&] {
//     PYG_TC_INT_SWITCH(p.lanes, L, (8, 16, 32), [&] { launch<T, VEC, L>(p, stream); });
//   });
//
// * PYG_TC_BOOL_SWITCH(cond, NAME, body): NAME is a constexpr bool.
// * PYG_TC_INT_SWITCH(value, NAME, (c1, c2, ...), body): NAME is the constexpr
//   int equal to value; only the listed cases are compiled, any other value
//   raises. The host rules (config tables, width ladders) compute the value;
//   the switch only maps it.
// * PYG_TC_DTYPE_SWITCH(scalar_type, NAME, "op", body): NAME is float, __half
//   or __nv_bfloat16 (float64 runs the pure-PyTorch reference on the Python
//   side); other dtypes raise ATen's "not implemented for" error.
//
// A family that compiles only part of a product of switches prunes the rest
// with `if constexpr` on a constexpr predicate next to its launcher (the
// pruned branch raises the family's "unsupported config" error).
#pragma once

#include <string>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <type_traits>

#define PYG_TC_BOOL_SWITCH(COND, NAME, ...) \
  [&] {                                     \
    if (COND) {                             \
      constexpr static bool NAME = true;    \
      return __VA_ARGS__();                 \
    } else {                                \
      constexpr static bool NAME = false;   \
      return __VA_ARGS__();                 \
    }                                       \
  }()

#define PYG_TC_UNPAREN(...) __VA_ARGS__

#define PYG_TC_INT_SWITCH(VALUE, NAME, CASES, ...)                                          \
  ::pyg_tc::detail::int_switch<PYG_TC_UNPAREN CASES>((VALUE), #VALUE, [&](auto pyg_tc_case) { \
    constexpr static int NAME = decltype(pyg_tc_case)::value;                              \
    return __VA_ARGS__();                                                                   \
  })

#define PYG_TC_DTYPE_SWITCH(SCALAR_TYPE, NAME, OP, ...)                                    \
  [&] {                                                                                    \
    const ::c10::ScalarType pyg_tc_st = (SCALAR_TYPE);                                     \
    switch (pyg_tc_st) {                                                                   \
      case ::c10::ScalarType::Float: {                                                     \
        using NAME = float;                                                                \
        return __VA_ARGS__();                                                              \
      }                                                                                    \
      case ::c10::ScalarType::Half: {                                                      \
        using NAME = __half;                                                               \
        return __VA_ARGS__();                                                              \
      }                                                                                    \
      case ::c10::ScalarType::BFloat16: {                                                  \
        using NAME = __nv_bfloat16;                                                        \
        return __VA_ARGS__();                                                              \
      }                                                                                    \
      default:                                                                             \
        TORCH_CHECK_NOT_IMPLEMENTED(false, '"', OP, "\" not implemented for '",            \
                                    ::c10::toString(pyg_tc_st), "'");                      \
    }                                                                                      \
  }()

namespace pyg_tc {
namespace detail {

// Calls body(std::integral_constant<int, C>) for the case C == value.
template <int... Cases, typename Body>
inline void int_switch(int64_t value, const char* what, Body&& body) {
  const bool hit = ((value == Cases ? (body(std::integral_constant<int, Cases>{}), true) : false) || ...);
  TORCH_CHECK(hit, "pyg_tc: no kernel compiled for ", what, " = ", std::to_string(value));
}

}  // namespace detail
}  // namespace pyg_tc
