// SPDX-License-Identifier: Apache-2.0
//
// The packet layout (docs/wire-format.md is the reference): header, per-bucket metadata, non-finite bucket
// flags, packed codes; each section starts at a multiple of 16 bytes and the packet's size is one too,
// so packets of one call can sit back to back in one buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "../config.hpp"
#include "float_types.hpp"

namespace qsdp::detail {

inline constexpr std::uint32_t packet_magic = 0x50445351u;  // "QSDP" read as little-endian bytes
inline constexpr std::uint16_t packet_version = 1;
inline constexpr std::size_t packet_alignment = 16;

/// The fixed 32-byte header at the start of every packet (little-endian, no padding).
struct packet_header {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint8_t quantizer_id;  // 1 uniform, 2 stochastic, 3 symmetric, 4 random_shift, 5 identity, 0 user
  std::uint8_t bits;          // code width; for identity 8 * sizeof(element)
  std::uint8_t element;       // element_type of the encoded values
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

QSDP_HOST_DEVICE constexpr packet_layout make_layout(std::size_t bits, std::size_t meta_size,
                                                     std::size_t bucket_size, std::size_t count) {
  packet_layout l;
  l.meta_offset = sizeof(packet_header);
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

inline const char* quantizer_id_name(std::uint8_t id) {
  switch (id) {
    case 0: return "user-defined";
    case 1: return "uniform";
    case 2: return "stochastic";
    case 3: return "symmetric";
    case 4: return "random_shift";
    case 5: return "identity";
    default: return "unknown";
  }
}

/// What a decoder expects to find in a header.
struct header_expectation {
  std::uint8_t quantizer_id;
  std::uint32_t wire_tag;
  std::uint8_t bits;
  std::uint8_t meta_size;
  std::uint64_t bucket_size;
  std::uint64_t count;
  int element = -1;  // required element_type, or -1 for any
};

/// Throws qsdp::error naming the first field of `h` that differs from `want`, with both values.
inline void check_header(const packet_header& h, const header_expectation& want, const char* where) {
  auto fail = [&](const std::string& what) {
    throw qsdp::error(std::string(where) + ": " + what);
  };
  if (h.magic != packet_magic)
    fail("not a qsdp packet: magic " + hex32(h.magic) + ", expected " + hex32(packet_magic) +
         " (corrupt or misplaced buffer)");
  if (h.version != packet_version)
    fail("packet format version " + std::to_string(h.version) + ", this build reads version " +
         std::to_string(packet_version));
  if (h.quantizer_id != want.quantizer_id || h.wire_tag != want.wire_tag)
    fail(std::string("packet was encoded by quantizer '") + quantizer_id_name(h.quantizer_id) +
         "' (id " + std::to_string(h.quantizer_id) + ", tag " + std::to_string(h.wire_tag) +
         "), decoder uses '" + quantizer_id_name(want.quantizer_id) + "' (id " +
         std::to_string(want.quantizer_id) + ", tag " + std::to_string(want.wire_tag) + ")");
  if (want.element >= 0 && h.element != want.element)
    fail(std::string("packet holds ") +
         element_type_name(static_cast<element_type>(h.element)) + " values (type " +
         std::to_string(h.element) + "), decoder expects " +
         element_type_name(static_cast<element_type>(want.element)));
  if (h.bits != want.bits)
    fail("packet has " + std::to_string(h.bits) + " bits per value, decoder expects " +
         std::to_string(want.bits));
  if (h.bucket_size != want.bucket_size)
    fail("packet bucket_size " + std::to_string(h.bucket_size) + ", decoder expects " +
         std::to_string(want.bucket_size));
  if (h.meta_size != want.meta_size)
    fail("packet has " + std::to_string(h.meta_size) + " bytes of metadata per bucket, decoder expects " +
         std::to_string(want.meta_size));
  if (h.count != want.count)
    fail("packet holds " + std::to_string(h.count) + " values, decoder was asked for " +
         std::to_string(want.count));
  if (h.reserved != 0)
    fail("reserved header field is " + std::to_string(h.reserved) + ", expected 0");
}

}  // namespace qsdp::detail
