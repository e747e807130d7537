// SPDX-License-Identifier: Apache-2.0
//
// The policy families of qsdp.torch by name and bit width, for both extensions: make_family picks
// P<bits> (or hadamard<P<bits>>) at run time and wraps it in Impl<Q> (the host extension's
// policy_impl, the CUDA extension's device_policy_impl); make_named dispatches a family name to the
// per-family factories, each instantiated in its own translation unit so that two cores build them
// side by side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <qsdp/config.hpp>
#include <qsdp/quantizers.hpp>

namespace qsdp::python {

/// Impl<Q> (or Impl<hadamard<Q>> when rotated) for a default Q with its bucket size and seed.
template <template <class> class Impl, class Q>
std::unique_ptr<typename Impl<Q>::interface> make_one(std::size_t bucket_size, std::uint64_t seed,
                                                      bool rotated) {
  Q inner{};
  inner.bucket_size = bucket_size;
  if constexpr (requires { inner.seed; }) inner.seed = seed;
  if (!rotated) return std::make_unique<Impl<Q>>(inner);
  qsdp::hadamard<Q> q{inner};
  q.seed = seed;
  return std::make_unique<Impl<qsdp::hadamard<Q>>>(q);
}

/// Impl<P<bits>> (or Impl<hadamard<P<bits>>> when rotated) for bits in [MinBits, 8]; `family`
/// names P in the message for another width.
template <template <class> class Impl, template <int> class P, int MinBits>
std::unique_ptr<typename Impl<P<8>>::interface> make_family(const char* family, int bits,
                                                            std::size_t bucket_size,
                                                            std::uint64_t seed, bool rotated) {
  std::unique_ptr<typename Impl<P<8>>::interface> made;
  [&]<int... B>(std::integer_sequence<int, B...>) {
    ((bits == B + MinBits
          ? (void)(made = make_one<Impl, P<B + MinBits>>(bucket_size, seed, rotated))
          : void()),
     ...);
  }
  (std::make_integer_sequence<int, 9 - MinBits>{});
  if (!made)
    throw qsdp::error(std::string("qsdp.torch.") + family + ": bits is " + std::to_string(bits) +
                      "; expected " + std::to_string(MinBits) + " to 8");
  return made;
}

/// A list of policy types.
template <class... Qs>
struct policy_list {};

/// The block-scaled float policies of qsdp.torch: the MX ones with 8- and 6-bit elements, and the
/// 4-bit ones (MXFP4, NVFP4), each list instantiated in its own translation unit.
using mx_policies =
    policy_list<qsdp::mxfp8<qsdp::e4m3>, qsdp::mxfp8<qsdp::e4m3, qsdp::rounding::stochastic>,
                qsdp::mxfp8<qsdp::e5m2>, qsdp::mxfp8<qsdp::e5m2, qsdp::rounding::stochastic>,
                qsdp::mxfp6<qsdp::e3m2>, qsdp::mxfp6<qsdp::e3m2, qsdp::rounding::stochastic>,
                qsdp::mxfp6<qsdp::e2m3>, qsdp::mxfp6<qsdp::e2m3, qsdp::rounding::stochastic>>;
using fp4_policies = policy_list<qsdp::mxfp4<>, qsdp::mxfp4<qsdp::rounding::stochastic>,
                                 qsdp::nvfp4<>, qsdp::nvfp4<qsdp::rounding::stochastic>>;

/// Impl<Q> (or Impl<hadamard<Q>>) for the Q of the list whose C++ name (policy_name) is `name`;
/// null when none is.
template <template <class> class Impl, class... Qs>
std::unique_ptr<typename Impl<qsdp::identity>::interface> make_by_name(policy_list<Qs...>,
                                                                       const std::string& name,
                                                                       std::size_t bucket_size,
                                                                       std::uint64_t seed,
                                                                       bool rotated) {
  std::unique_ptr<typename Impl<qsdp::identity>::interface> made;
  ((!made && name == qsdp::policy_name<Qs>()
        ? (void)(made = make_one<Impl, Qs>(bucket_size, seed, rotated))
        : void()),
   ...);
  return made;
}

/// The per-family factories of one extension.
template <class Interface>
struct family_factories {
  using maker = std::unique_ptr<Interface> (*)(int bits, std::size_t bucket_size,
                                               std::uint64_t seed, bool rotated);
  /// Null where the name is not one of its policies'.
  using by_name = std::unique_ptr<Interface> (*)(const std::string& name, std::size_t bucket_size,
                                                 std::uint64_t seed, bool rotated);
  maker stochastic, uniform, symmetric, random_shift;
  std::unique_ptr<Interface> (*identity)();
  by_name mx, fp4;
};

/// A built-in policy: family "stochastic", "uniform", "symmetric" or "random_shift" (bits 1..8,
/// random_shift 2..8), or a block-scaled float policy by its C++ name ("mxfp8<e4m3>",
/// "nvfp4<stochastic>"; bits ignored), optionally rotated (qsdp::hadamard<...>); "identity" takes
/// no bits. seed is ignored by the policies that draw nothing. Throws qsdp::error naming a bad
/// argument.
template <class Interface>
std::unique_ptr<Interface> make_named(const family_factories<Interface>& f,
                                      const std::string& family, int bits, std::size_t bucket_size,
                                      std::uint64_t seed, bool rotated) {
  if (family == "stochastic") return f.stochastic(bits, bucket_size, seed, rotated);
  if (family == "uniform") return f.uniform(bits, bucket_size, seed, rotated);
  if (family == "symmetric") return f.symmetric(bits, bucket_size, seed, rotated);
  if (family == "random_shift") return f.random_shift(bits, bucket_size, seed, rotated);
  if (family == "identity" && !rotated) return f.identity();
  const typename family_factories<Interface>::by_name block_scaled[] = {f.mx, f.fp4};
  for (const auto make : block_scaled)
    if (auto made = make(family, bucket_size, seed, rotated)) return made;
  throw qsdp::error("qsdp.torch: policy family \"" + family + "\"" +
                    (rotated ? " under hadamard" : "") +
                    "; expected stochastic, uniform, symmetric, random_shift, a block-scaled "
                    "float policy (mxfp8<e4m3>, mxfp8<e5m2>, mxfp6<e3m2>, mxfp6<e2m3>, mxfp4, "
                    "nvfp4, each also with stochastic rounding)" +
                    (rotated ? "" : " or identity"));
}

/// The error of a layout call (`where`) on a policy (`policy`, its name) that has no block-scaled
/// layout, host and device alike.
inline qsdp::error not_block_scaled(const std::string& where, const std::string& policy) {
  return qsdp::error(where + ": policy " + policy +
                     " has no block-scaled layout; expected an MX policy (qt.mxfp8, qt.mxfp6, "
                     "qt.mxfp4; not rotated)");
}

}  // namespace qsdp::python
