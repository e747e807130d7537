// SPDX-License-Identifier: Apache-2.0
//
// The packet layout (docs/reference/wire-format.md): header, per-bucket metadata, non-finite
// bucket flags, packed codes; each section starts at a multiple of 16 bytes and the packet's size
// is one too, so packets of one call can sit back to back in one buffer.
#pragma once

// tests/CMakeLists.txt checks that no transport header pulls the wire format in.
#define QSDP_DETAIL_WIRE_FORMAT_INCLUDED 1

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "../../config.hpp"
#include "../../policy.hpp"
#include "float_types.hpp"
#include "hadamard.hpp"

namespace qsdp::detail {

inline constexpr std::uint32_t packet_magic = 0x50445351u;  // "QSDP" read as little-endian bytes
inline constexpr std::uint16_t packet_version = 1;
inline constexpr std::size_t packet_alignment = 16;

/// The fixed 32-byte header at the start of every packet (little-endian, no padding).
struct packet_header {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint8_t
      quantizer_id;      // 1 uniform, 2 stochastic, 3 symmetric, 4 random_shift, 5 identity, 0 user
  std::uint8_t bits;     // code width; for identity 8 * sizeof(element)
  std::uint8_t element;  // element_type of the encoded values
  std::uint8_t meta_size;     // bytes of metadata per bucket
  std::uint16_t reserved;     // 0
  std::uint32_t wire_tag;     // user policies' optional `wire_tag`; 0 for the built-ins
  std::uint64_t bucket_size;  // values per bucket (0 for identity: no buckets)
  std::uint64_t count;        // values in the packet
};
static_assert(sizeof(packet_header) == 32, "packet_header must be 32 bytes with no padding");

QSDP_HOST_DEVICE constexpr std::size_t align_up(std::size_t n) {
  return (n + packet_alignment - 1) / packet_alignment * packet_alignment;
}

/// Offsets of a packet's sections, all derived from header fields.
struct packet_layout {
  std::size_t buckets = 0;
  std::size_t meta_offset = 0;
  std::size_t flags_offset = 0;
  std::size_t codes_offset = 0;
  std::size_t code_bytes = 0;  // bytes of codes actually used (before padding)
  std::size_t total = 0;
};

/// Largest count a packet may describe: keeps every size computation below far from overflow.
inline constexpr std::uint64_t max_packet_count = std::uint64_t{1} << 56;

/// `records` is the bytes of the records between the header and the metadata (records_bytes: the
/// rotation record of hadamard<> packets, then the tensor record of tensor-scaled policies).
QSDP_HOST_DEVICE constexpr packet_layout make_layout(std::size_t bits, std::size_t meta_size,
                                                     std::size_t bucket_size, std::size_t count,
                                                     std::size_t records = 0) {
  packet_layout l;
  l.meta_offset = sizeof(packet_header) + records;
  if (bucket_size == 0) {  // identity: raw values, no buckets
    l.flags_offset = l.codes_offset = l.meta_offset;
    l.code_bytes = count * (bits / 8);
  } else {
    l.buckets = count / bucket_size + (count % bucket_size != 0);
    l.flags_offset = align_up(l.meta_offset + l.buckets * meta_size);
    l.codes_offset = align_up(l.flags_offset + (l.buckets + 7) / 8);
    l.code_bytes = (count * bits + 7) / 8;
  }
  l.total = align_up(l.codes_offset + l.code_bytes);
  return l;
}

inline packet_header read_header(const std::byte* packet) {
  packet_header h;
  std::memcpy(&h, packet, sizeof h);
  return h;
}

inline std::string hex32(std::uint32_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xF];
  return s;
}

/// The policy family of wire id `id` (docs/reference/wire-format.md lists them), as a constant.
inline const char* quantizer_id_name(std::uint8_t id) {
  static constexpr const char* plain[] = {
      "user-defined", "uniform",     "stochastic",  "symmetric",   "random_shift", "identity",
      "mxfp8<e4m3>",  "mxfp8<e5m2>", "mxfp6<e3m2>", "mxfp6<e2m3>", "mxfp4",        "nvfp4"};
  static constexpr const char* rotated[] = {
      "hadamard<user-defined>", "hadamard<uniform>",      "hadamard<stochastic>",
      "hadamard<symmetric>",    "hadamard<random_shift>", nullptr,  // identity is never rotated
      "hadamard<mxfp8<e4m3>>",  "hadamard<mxfp8<e5m2>>",  "hadamard<mxfp6<e3m2>>",
      "hadamard<mxfp6<e2m3>>",  "hadamard<mxfp4>",        "hadamard<nvfp4>"};
  constexpr std::size_t known = sizeof plain / sizeof plain[0];
  const std::size_t family = id & ~hadamard_id_bit & 0xFFu;
  const char* name = family >= known          ? nullptr
                     : (id & hadamard_id_bit) ? rotated[family]
                                              : plain[family];
  return name ? name : "unknown";
}

/// What a decoder expects to find in a header. bits 0 stands for raw values (identity): the
/// packet's element type must be one qsdp writes and bits its width.
struct header_expectation {
  std::uint8_t quantizer_id;
  std::uint32_t wire_tag;
  std::uint8_t bits;
  std::uint8_t meta_size;
  std::uint64_t bucket_size;
  std::uint64_t count;
  int element = -1;  // required element_type, or -1 for any
};

/// Bits per value of raw values of element type `element` (1..4), 0 for any other.
QSDP_HOST_DEVICE constexpr unsigned raw_bits_of(unsigned element) {
  return element == 1 ? 32u : element == 2 ? 64u : (element == 3 || element == 4) ? 16u : 0u;
}

/// The header fields a decoder checks, in the order it checks them.
enum class header_field : std::uint8_t {
  none,  // the header is the one expected
  magic,
  version,
  quantizer,
  element,
  unknown_element,
  bits,
  bucket_size,
  meta_size,
  count,
  reserved
};

/// The first field in which `h` differs from what `want` describes, or none: the one statement of
/// what a valid header is, run by the host decoders (check_header) and by the device kernels.
QSDP_HOST_DEVICE constexpr header_field header_mismatch(const packet_header& h,
                                                        const header_expectation& want) {
  if (h.magic != packet_magic) return header_field::magic;
  if (h.version != packet_version) return header_field::version;
  if (h.quantizer_id != want.quantizer_id || h.wire_tag != want.wire_tag)
    return header_field::quantizer;
  if (want.element >= 0 && h.element != want.element) return header_field::element;
  const bool raw = want.bits == 0;
  if (raw && raw_bits_of(h.element) == 0) return header_field::unknown_element;
  if (h.bits != (raw ? raw_bits_of(h.element) : want.bits)) return header_field::bits;
  if (h.bucket_size != want.bucket_size) return header_field::bucket_size;
  if (h.meta_size != want.meta_size) return header_field::meta_size;
  if (h.count != want.count) return header_field::count;
  if (h.reserved != 0) return header_field::reserved;
  return header_field::none;
}

/// Throws qsdp::error naming the first field of `h` that differs from `want`, with both values.
inline void check_header(const packet_header& h, const header_expectation& want,
                         const char* where) {
  const header_field field = header_mismatch(h, want);
  if (field == header_field::none) return;
  const auto num = [](auto v) { return std::to_string(v); };
  std::string what;
  switch (field) {
    case header_field::none: break;
    case header_field::magic:
      what = "not a qsdp packet: magic " + hex32(h.magic) + ", expected " + hex32(packet_magic) +
             " (corrupt or misplaced buffer)";
      break;
    case header_field::version:
      what = "packet format version " + num(h.version) + ", this build reads version " +
             num(packet_version);
      break;
    case header_field::quantizer:
      what = std::string("packet was encoded by quantizer '") + quantizer_id_name(h.quantizer_id) +
             "' (id " + num(h.quantizer_id) + ", tag " + num(h.wire_tag) + "), decoder uses '" +
             quantizer_id_name(want.quantizer_id) + "' (id " + num(want.quantizer_id) + ", tag " +
             num(want.wire_tag) + ")";
      break;
    case header_field::element:
      what = std::string("packet holds ") +
             element_type_name(static_cast<element_type>(h.element)) + " values (type " +
             num(h.element) + "), decoder expects " +
             element_type_name(static_cast<element_type>(want.element));
      break;
    case header_field::unknown_element:
      what = "packet element type " + num(h.element) + " is not one qsdp writes";
      break;
    case header_field::bits:
      what = "packet has " + num(h.bits) + " bits per value, decoder expects " +
             num(want.bits == 0 ? raw_bits_of(h.element) : want.bits);
      break;
    case header_field::bucket_size:
      what =
          "packet bucket_size " + num(h.bucket_size) + ", decoder expects " + num(want.bucket_size);
      break;
    case header_field::meta_size:
      what = "packet has " + num(h.meta_size) + " bytes of metadata per bucket, decoder expects " +
             num(want.meta_size);
      break;
    case header_field::count:
      what = "packet holds " + num(h.count) + " values, decoder was asked for " + num(want.count);
      break;
    case header_field::reserved:
      what = "reserved header field is " + num(h.reserved) + ", expected 0";
      break;
  }
  throw qsdp::error(std::string(where) + ": " + what);
}

/// Bytes of metadata per bucket (none for identity).
template <class Q>
QSDP_HOST_DEVICE constexpr std::size_t meta_size_of() {
  if constexpr (is_identity<Q>)
    return 0;
  else
    return sizeof(typename Q::meta_type);
}

/// The packet-wide record of a tensor-scaled policy (policy_traits.hpp): its tensor_meta's bytes,
/// zero-padded to 16, after the header and any rotation record.
inline constexpr std::size_t tensor_record_size = 16;

/// Bytes of the records between the header and the metadata of a packet of Q.
template <class Q>
QSDP_HOST_DEVICE constexpr std::size_t records_bytes() {
  if constexpr (is_identity<Q>)
    return 0;
  else
    return rotation_bytes(wire_id<Q>()) + (tensor_scaled<Q>() ? tensor_record_size : 0);
}

/// Where the tensor record of a packet of Q starts.
template <class Q>
QSDP_HOST_DEVICE constexpr std::size_t tensor_record_offset() {
  return sizeof(packet_header) + rotation_bytes(wire_id<Q>());
}

/// Writes the tensor record of a packet of tensor-scaled Q.
template <class Q>
QSDP_HOST_DEVICE void write_tensor_record(std::byte* packet,
                                          const typename Q::tensor_meta_type& m) {
  std::byte record[tensor_record_size]{};
  memcpy(record, &m, sizeof m);
  memcpy(packet + tensor_record_offset<Q>(), record, sizeof record);
}

/// Sets q's tensor_meta to the tensor record of `packet` (encoded by Q), which q's fit, encode and
/// decode then read; nothing for a policy without one. In place: the kernels bind their own copy
/// of the policy (a policy with a call_counter cannot be copied in device code).
template <class Q>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE void bind_to_packet(Q& q, const std::byte* packet) {
  if constexpr (tensor_scaled<Q>())
    memcpy(&q.tensor_meta, packet + tensor_record_offset<Q>(), sizeof q.tensor_meta);
  else
    (void)q, (void)packet;
}

/// The policy that decodes `packet` on the host: q itself, or for a tensor-scaled Q a copy bound
/// to the packet's tensor record.
template <class Q>
decltype(auto) packet_policy(const Q& q, const std::byte* packet) {
  if constexpr (tensor_scaled<Q>()) {
    Q bound = q;
    bind_to_packet(bound, packet);
    return bound;
  } else {
    (void)packet;
    return (q);
  }
}

/// The layout of a packet of `count` values of T encoded with q.
template <class Q, class T>
QSDP_HOST_DEVICE packet_layout layout_for(const Q& q, std::size_t count) {
  if constexpr (is_identity<Q>)
    return make_layout(8 * sizeof(T), 0, 0, count);
  else
    return make_layout(Q::bits, sizeof(typename Q::meta_type), q.bucket_size, count,
                       records_bytes<Q>());
}

/// Writes what a packet header and a call descriptor both say about the encoder: the policy
/// (quantizer id, wire tag, bits, metadata size, bucket size) and the element type, into any record
/// with those fields, so that a rank's packets and its calls identify it the same way.
template <class Q, class T, class Record>
QSDP_HOST_DEVICE void write_encoder_identity(const Q& q, Record& r) {
  r.quantizer_id = wire_id<Q>();
  r.element = static_cast<std::uint8_t>(element_traits<T>::tag);
  r.wire_tag = wire_tag<Q>();
  if constexpr (is_identity<Q>) {
    (void)q;
    r.bits = static_cast<std::uint8_t>(8 * sizeof(T));  // raw values; no metadata, no buckets
  } else {
    r.bits = Q::bits;
    r.meta_size = sizeof(typename Q::meta_type);
    r.bucket_size = q.bucket_size;
  }
}

/// The header an encoder of Q writes for `count` values of T.
template <class Q, class T>
QSDP_HOST_DEVICE packet_header make_header(const Q& q, std::size_t count) {
  packet_header h{};
  h.magic = packet_magic;
  h.version = packet_version;
  write_encoder_identity<Q, T>(q, h);
  h.count = count;
  return h;
}

/// What a decoder of policy Q expects in the header of a packet of `count` values: `element` is the
/// element_type it decodes into, or -1 for any (accumulation, which reads quantized packets of any
/// type; raw values of identity packets are read in their own type).
template <class Q>
header_expectation expectation_for(const Q& q, std::size_t count, int element) {
  header_expectation e{};
  e.quantizer_id = wire_id<Q>();
  e.wire_tag = wire_tag<Q>();
  e.count = count;
  if constexpr (is_identity<Q>) {
    e.bits = 0;  // raw values: the width of their element type
    e.element = element;
  } else {
    e.bits = Q::bits;
    e.meta_size = sizeof(typename Q::meta_type);
    e.bucket_size = q.bucket_size;
  }
  return e;
}

/// What a decoder of policy Q into T expects.
template <class T, class Q>
header_expectation expectation_for(const Q& q, std::size_t count) {
  return expectation_for(q, count, static_cast<int>(element_traits<T>::tag));
}

}  // namespace qsdp::detail
