// SPDX-License-Identifier: Apache-2.0
//
// The device codec: launchers for the kernels of codec_kernels.cuh, and the definitions of the
// device overloads of encode, decode and decode_accumulate declared in qsdp/device_codec.hpp (which
// includes this file when nvcc compiles it). Calls are stream-ordered and never synchronise. A bad
// packet header is found by the decoding kernel itself: its values come out as NaN and the failure
// is reported by qsdp::synchronize_and_check(stream), or by the next device codec call on that
// device.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "../../codec.hpp"
#include "../../quantizers.hpp"
#include "../codec/checks.hpp"
#include "../codec/format.hpp"
#include "../codec/group.hpp"
#include "../transport/cuda_runtime.hpp"
#include "codec_kernels.cuh"
#include "hadamard_kernels.cuh"

namespace qsdp::detail::cuda {

template <class T>
consteval void require_device_element() {
  static_assert(
      std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
      "qsdp's CUDA path takes float, __half or __nv_bfloat16 device buffers");
}

/// Launches kernel<<<grid, block, 0, stream>>>(args...) and turns a launch failure into a
/// qsdp::error. (tests/simt defines QSDP_SIMT_EMULATION to run the same kernels on the host, block
/// by block, with a grid of at most three blocks so that the grid-stride loops are exercised too.)
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), unsigned grid, unsigned block, cudaStream_t stream,
            const char* name, const char* where, Args&&... args) {
#if defined(QSDP_SIMT_EMULATION)
  (void)stream;
  (void)name;
  (void)where;
  ::qsdp_simt::launch(kernel, grid < 3 ? grid : 3, block, std::forward<Args>(args)...);
#else
  // clang-format 14 would split the triple chevrons.
  // clang-format off
  kernel<<<grid, block, 0, stream>>>(std::forward<Args>(args)...);
  // clang-format on
  check_launch(name, where);
#endif
}

/// log2 of the bucket size when it is a power of two in [lo, hi], else -1.
inline int pow2_log(std::size_t bucket, std::size_t lo, std::size_t hi) {
  if (bucket < lo || bucket > hi || (bucket & (bucket - 1)) != 0) return -1;
  int log = 0;
  while ((std::size_t{1} << log) < bucket) ++log;
  return log;
}

/// Encodes count values at src (device) into the packet (device), stream-ordered.
template <class Q, class T>
void launch_encode(const Q& q, const T* src, std::size_t count, std::byte* packet,
                   const rng_source& source, cudaStream_t stream, const char* where) {
  const packet_layout l = layout_for<Q, T>(q, count);
  const packet_header h = make_header<Q, T>(q, count);
  const std::size_t meta_end =
      is_identity<Q> ? l.codes_offset : l.meta_offset + l.buckets * meta_size_of<Q>();
  const std::size_t code_end = l.codes_offset + l.code_bytes;
  const std::size_t frame_bytes =
      sizeof(packet_header) + (l.codes_offset - meta_end) + (l.total - code_end);
  constexpr std::size_t record_bytes = tensor_scaled<Q>() ? tensor_record_size : 0;
  launch(write_frame_kernel<>, grid_for(frame_bytes + record_bytes, codec_block), codec_block,
         stream, "write_frame_kernel", where, packet, h, tensor_record_offset<Q>(), record_bytes,
         meta_end, l.codes_offset, code_end, l.total);
  if constexpr (tensor_scaled<Q>()) {
    // The packet-wide metadata before any bucket's: every encode kernel reads it.
    if (count > 0)
      launch(tensor_abs_max_kernel<T>, grid_for((count + 7) / 8, codec_block), codec_block, stream,
             "tensor_abs_max_kernel", where, src, count, tensor_max_slot<Q>(packet));
    launch(tensor_record_kernel<Q>, 1, 1, stream, "tensor_record_kernel", where, q, packet);
  }
  if constexpr (rotated<Q>()) {
    // Launched for count 0 too: its first thread writes the rotation record, whose call index
    // may come from the device counter.
    const int log2_bucket = pow2_log(q.bucket_size, hadamard_min_bucket, hadamard_max_bucket);
    launch(rotated_encode_kernel<Q, T>, grid_for((count + rotation_tile - 1) / rotation_tile, 1),
           rotation_block, stream, "rotated_encode_kernel", where, q, src, count, packet, l, source,
           static_cast<unsigned>(log2_bucket), aligned16(packet));
    return;
  }
  if (count == 0) return;
  if constexpr (is_identity<Q>) {
    check(cudaMemcpyAsync(packet + l.codes_offset, src, count * sizeof(T), cudaMemcpyDeviceToDevice,
                          stream),
          "cudaMemcpyAsync", where);
  } else {
    const std::uint64_t groups = (count + group_values - 1) / group_values;
    const std::uint64_t spans = (count + span_values - 1) / span_values;
    const int log2_bucket = pow2_log(q.bucket_size, span_values, 4096);
    const bool element_aligned = reinterpret_cast<std::uintptr_t>(src) % sizeof(T) == 0;
    if (log2_bucket >= 0 && element_aligned && aligned16(packet)) {
      auto kernel =
          aligned16(src) ? encode_spans_kernel<Q, T, true> : encode_spans_kernel<Q, T, false>;
      if constexpr (encodes_any_bucket<Q>) {
        if (log2_bucket == 5)  // a span per block of 32: no reduction
          kernel = aligned16(src) ? encode_spans_kernel<Q, T, true, true>
                                  : encode_spans_kernel<Q, T, false, true>;
      }
      launch(kernel, grid_for(spans, fast_encode_block), fast_encode_block, stream,
             "encode_spans_kernel", where, q, src, count, packet, l, source,
             static_cast<unsigned>(log2_bucket));
    } else {
      launch(bucket_meta_kernel<Q, T>, grid_for(l.buckets, codec_block / 32), codec_block, stream,
             "bucket_meta_kernel", where, q, src, count, packet, l, source);
      launch(encode_groups_kernel<Q, T>, grid_for(groups, codec_block), codec_block, stream,
             "encode_groups_kernel", where, q, src, count, packet, l, source);
    }
  }
}

/// Moves the device call counter at `counter` on by `calls`, stream-ordered after the encodes that
/// read it.
inline void launch_advance_calls(std::uint64_t* counter, std::uint64_t calls, cudaStream_t stream,
                                 const char* where) {
  launch(advance_calls_kernel<>, 1, 1, stream, "advance_calls_kernel", where, counter, calls);
}

/// Where the spans kernel may write a sink's output: its skew (bytes past a 16-byte boundary), or
/// -1 where it may not. It takes any whole-element skew (store_span_words); a pointer that is not a
/// multiple of its element's size goes to the general kernel.
template <class T>
int output_skew(const T* p) {
  const auto skew = static_cast<int>(reinterpret_cast<std::uintptr_t>(p) % 16);
  return skew % static_cast<int>(sizeof(T)) == 0 ? skew : -1;
}
template <class T>
int span_skew(const store_sink<T>& sink) {
  return output_skew(sink.dst);
}
template <class T>
int span_skew(const reduce_sink<T>& sink) {
  return output_skew(sink.dst);
}
inline int span_skew(const accumulate_sink& sink) { return output_skew(sink.acc); }

/// Decodes `packet_count` packets of `count` values each (packet p at packets + p * packet_bytes)
/// into the sink. Failures are reported with packet index first_index + p.
template <class Q, class Sink>
void launch_decode(const Q& q, const std::byte* packets, std::size_t packet_bytes,
                   unsigned packet_count, std::size_t count, const header_expectation& want,
                   unsigned first_index, device_report* failure, const Sink& sink,
                   cudaStream_t stream, const char* where) {
  packet_layout l;
  int log2_bucket = -1;
  if constexpr (is_identity<Q>) {
    l = make_layout(want.bits == 0 ? 8 : want.bits, 0, 0, count);  // only codes_offset is read
  } else {
    l = layout_for<Q, float>(q, count);  // the element type does not move a quantized layout
    log2_bucket = pow2_log(q.bucket_size, group_values, std::size_t{1} << 62);
  }
  if constexpr (rotated<Q>()) {  // count 0 too: the kernel checks the headers
    launch(rotated_decode_kernel<Q, Sink>, grid_for((count + rotation_tile - 1) / rotation_tile, 1),
           rotation_block, stream, "rotated_decode_kernel", where, q, packets, packet_bytes,
           packet_count, first_index, count, l, want, static_cast<unsigned>(log2_bucket),
           aligned16(packets) && (packet_count == 1 || packet_bytes % 16 == 0), failure, sink);
    return;
  }
  const std::uint64_t groups = (count + group_values - 1) / group_values;
  std::uint64_t first_group = 0;
  if constexpr (!is_identity<Q>) {
    // Whole spans of 32 values through the fast kernel when buckets hold whole spans and every
    // buffer allows 16-byte words; the general kernel decodes the rest.
    const bool aligned = aligned16(packets) && (packet_count == 1 || packet_bytes % 16 == 0);
    const std::uint64_t spans = count / span_values;
    const int skew = span_skew(sink);
    if (log2_bucket >= 5 && aligned && skew >= 0 && spans > 0) {
      auto* kernel = decode_spans_kernel<Q, Sink, false>;
      if constexpr (shuffled_width<Q::bits>)
        if (log2_bucket >= shuffled_min_log2_bucket) kernel = decode_spans_kernel<Q, Sink, true>;
      launch(kernel, grid_for(spans, codec_block), codec_block, stream, "decode_spans_kernel",
             where, q, packets, packet_bytes, packet_count, first_index, spans, l, want,
             log2_bucket, failure, sink, static_cast<unsigned>(skew));
      first_group = spans * (span_values / group_values);
      if (first_group == groups) return;
    }
  }
  launch(decode_kernel<Q, Sink>, grid_for(groups - first_group, codec_block), codec_block, stream,
         "decode_kernel", where, q, packets, packet_bytes, packet_count, first_index, count,
         first_group, l, want, log2_bucket, aligned16(packets), failure, sink);
}

/// The failure channel of the plain device codec calls, one per device (collectives use their
/// communicator's own).
inline failure_channel& codec_failures(int device) {
  static std::mutex guard;
  static std::array<std::unique_ptr<failure_channel>, 64> channels;
  std::lock_guard lock(guard);
  if (device < 0 || device >= static_cast<int>(channels.size()))
    throw qsdp::error("qsdp device codec: device " + std::to_string(device) + " is out of range");
  auto& c = channels[static_cast<std::size_t>(device)];
  if (!c) {
    c = std::make_unique<failure_channel>();
    c->device_record("qsdp device codec", describe_bad_header);  // allocated here, under the lock
  }
  return *c;
}

/// Shared argument checks of the device codec calls; returns the stream's device.
template <class Q>
int check_device_call(const Q& q, std::size_t count, cudaStream_t stream, const char* where) {
  require_policy<Q>();
  check_bucket_size(q, where);
  check_count(count, where);
  const int device = stream_device(stream, where);
  codec_failures(device).poll(where);  // an earlier call's bad packet is reported before new work
  return device;
}

/// The packet buffer must not be null; the values buffer not null when count > 0; both device
/// memory of `device`.
inline void require_device_buffers(const void* packet, const char* packet_name, const void* values,
                                   const char* values_name, std::size_t count, int device,
                                   const char* where) {
  if (packet == nullptr) throw qsdp::error(std::string(where) + ": " + packet_name + " is null");
  require_device_pointer(packet, packet_name, device, where);
  if (count == 0) return;
  if (values == nullptr)
    throw qsdp::error(std::string(where) + ": " + values_name + " is null with count " +
                      std::to_string(count));
  require_device_pointer(values, values_name, device, where);
}

/// The record where the decoding kernels of the plain device codec calls report a bad header.
inline device_report* codec_report(int device, const char* where) {
  return codec_failures(device).device_record(where, describe_bad_header);
}

/// Launches unpack_block_scaled_kernel over `packet_count` packets of `count` values (MX policy q),
/// their layouts `element_stride` and `scale_stride` apart.
template <class Q>
void launch_unpack_block_scaled(const Q& q, const std::byte* packets, std::size_t packet_bytes,
                                unsigned packet_count, std::size_t count,
                                const header_expectation& want, unsigned first_index,
                                device_report* failure, std::byte* elements,
                                std::size_t element_stride, std::uint8_t* scales,
                                std::size_t scale_stride, cudaStream_t stream, const char* where) {
  const packet_layout l = layout_for<Q, float>(q, count);
  launch(unpack_block_scaled_kernel<Q::bits>,
         grid_for(layout_element_bytes(Q::bits, count), codec_block), codec_block, stream,
         "unpack_block_scaled_kernel", where, packets, packet_bytes, packet_count, first_index,
         static_cast<std::uint64_t>(count), l, want, failure, elements, element_stride, scales,
         scale_stride);
}

}  // namespace qsdp::detail::cuda

namespace qsdp {

template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, rng_position position,
            cudaStream_t stream) {
  constexpr const char* where = "qsdp::encode (device)";
  detail::cuda::require_device_element<T>();
  const int device = detail::cuda::check_device_call(q, count, stream, where);
  if (position.stream >= (1u << 31))
    throw qsdp::error(std::string(where) + ": rng_position.stream is " +
                      std::to_string(position.stream) + "; expected < 2^31");
  detail::cuda::require_device_buffers(packet, "packet", src, "src", count, device, where);
  detail::cuda::launch_encode(q, src, count, packet,
                              detail::rng_key{detail::seed_of(q), position.call, position.stream},
                              stream, where);
}

template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet,
            device_rng_position position, cudaStream_t stream) {
  constexpr const char* where = "qsdp::encode (device)";
  detail::cuda::require_device_element<T>();
  const int device = detail::cuda::check_device_call(q, count, stream, where);
  if (position.stream >= (1u << 31))
    throw qsdp::error(std::string(where) + ": device_rng_position.stream is " +
                      std::to_string(position.stream) + "; expected < 2^31");
  if (position.call == nullptr)
    throw qsdp::error(std::string(where) +
                      ": device_rng_position.call is null; expected a std::uint64_t in device "
                      "memory holding the call index");
  if (reinterpret_cast<std::uintptr_t>(position.call) % alignof(std::uint64_t) != 0)
    throw qsdp::error(std::string(where) + ": device_rng_position.call (" +
                      detail::cuda::address(position.call) + ") is not 8-byte aligned");
  detail::cuda::require_device_pointer(position.call, "device_rng_position.call", device, where);
  detail::cuda::require_device_buffers(packet, "packet", src, "src", count, device, where);
  detail::cuda::launch_encode(
      q, src, count, packet,
      detail::cuda::rng_source(detail::rng_key{detail::seed_of(q), 0, position.stream},
                               position.call),
      stream, where);
  detail::cuda::launch_advance_calls(position.call, 1, stream, where);
}

template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, cudaStream_t stream) {
  const detail::rng_key key = detail::next_key(q);
  encode(q, src, count, packet, rng_position{.call = key.call, .stream = 0}, stream);
}

template <class Q, class T>
void decode(const Q& q, const std::byte* packet, std::size_t count, T* dst, cudaStream_t stream) {
  constexpr const char* where = "qsdp::decode (device)";
  detail::cuda::require_device_element<T>();
  const int device = detail::cuda::check_device_call(q, count, stream, where);
  detail::cuda::require_device_buffers(packet, "packet", dst, "dst", count, device, where);
  detail::cuda::launch_decode(q, packet, 0, 1, count, detail::expectation_for<T>(q, count), 0,
                              detail::cuda::codec_report(device, where),
                              detail::cuda::store_sink<T>{dst, detail::cuda::aligned16(dst)},
                              stream, where);
}

template <class Q>
void decode_accumulate(const Q& q, const std::byte* packets, std::size_t packet_count,
                       std::size_t count, float* acc, cudaStream_t stream) {
  constexpr const char* where = "qsdp::decode_accumulate (device)";
  const int device = detail::cuda::check_device_call(q, count, stream, where);
  if (packet_count == 0) return;
  if (packet_count > 0xFFFFFFFFu)
    throw qsdp::error(std::string(where) + ": packet_count is " + std::to_string(packet_count) +
                      "; expected < 2^32");
  detail::cuda::require_device_buffers(packets, "packets", acc, "acc", count, device, where);
  std::size_t packet_bytes = 0;
  if constexpr (detail::is_identity<Q>) {
    // Raw packets of any element type: their size depends on it, so all must be of one type; the
    // kernel checks each header, the size comes from the first packet's type, read here.
    if (detail::cuda::capturing(stream, where))
      throw qsdp::error(
          std::string(where) +
          ": identity packets are sized by their element type, which "
          "this call reads from the first header on the host; that cannot happen inside CUDA "
          "graph capture");
    detail::packet_header h{};
    detail::cuda::check(cudaMemcpyAsync(&h, packets, sizeof h, cudaMemcpyDeviceToHost, stream),
                        "cudaMemcpyAsync", where);
    detail::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", where);
    detail::check_header(h, detail::expectation_for(q, count, -1), where);
    packet_bytes = detail::make_layout(h.bits, 0, 0, count).total;
  } else {
    packet_bytes = detail::layout_for<Q, float>(q, count).total;
  }
  const detail::header_expectation want = detail::expectation_for(q, count, -1);
  detail::cuda::launch_decode(q, packets, packet_bytes, static_cast<unsigned>(packet_count), count,
                              want, 0, detail::cuda::codec_report(device, where),
                              detail::cuda::accumulate_sink{acc, detail::cuda::aligned16(acc)},
                              stream, where);
}

template <class Q>
void unpack_block_scaled(const Q& q, const std::byte* packet, std::size_t count,
                         block_scaled_buffers out, cudaStream_t stream) {
  static_assert(detail::block_scaled_layout_policy<Q>,
                "qsdp::unpack_block_scaled: Q must be an MX policy (mxfp8, mxfp6, mxfp4; not "
                "rotated, not nvfp4, whose tensor scale is per packet)");
  constexpr const char* where = "qsdp::unpack_block_scaled (device)";
  const int device = detail::cuda::check_device_call(q, count, stream, where);
  detail::check_block_scaled_count(q, count, where);
  detail::cuda::require_device_buffers(packet, "packet", out.elements, "out.elements", count,
                                       device, where);
  detail::cuda::require_device_buffers(packet, "packet", out.scales, "out.scales", count, device,
                                       where);
  detail::cuda::launch_unpack_block_scaled(
      q, packet, 0, 1, count, detail::expectation_for(q, count, -1), 0,
      detail::cuda::codec_report(device, where), out.elements, 0, out.scales, 0, stream, where);
}

inline void synchronize_and_check(cudaStream_t stream) {
  constexpr const char* where = "qsdp::synchronize_and_check";
  detail::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", where);
  detail::cuda::codec_failures(detail::cuda::stream_device(stream, where))
      .poll("qsdp::decode (device)");
}

}  // namespace qsdp
