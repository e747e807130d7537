// SPDX-License-Identifier: Apache-2.0
//
// The qsdp._ext module: qsdp::python::policy and group_communicator as Python classes, qsdp::error
// as qsdp.Error (a RuntimeError), the same messages as in C++.
#include "ext.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <cstring>

#include "policy_impl.hpp"

namespace qsdp::python {

group_communicator::group_communicator(int rank, int size, nb::callable all_gather,
                                       nb::callable all_to_all)
    : rank_(rank),
      size_(size),
      all_gather_(std::move(all_gather)),
      all_to_all_(std::move(all_to_all)) {
  check_group_shape(rank, size);
}

namespace {

/// A uint8 torch tensor viewing n bytes at `data` (no copy, no owner: valid during the call).
nb::object byte_view(const std::byte* data, std::size_t n) {
  using view = nb::ndarray<nb::pytorch, std::uint8_t, nb::ndim<1>, nb::device::cpu>;
  const std::size_t shape[1] = {n};
  return nb::cast(view(const_cast<std::byte*>(data), 1, shape, nb::handle()),
                  nb::rv_policy::reference);
}

/// `send` itself, or a copy of it when it lies inside `recv` (the collectives gather in place; the
/// torch collectives take no overlapping buffers).
const std::byte* outside(const std::byte* send, std::size_t n, const std::byte* recv,
                         std::size_t recv_bytes, host_workspace& copy) {
  if (n == 0 || send + n <= recv || send >= recv + recv_bytes) return send;
  std::byte* c = copy.get(n);
  std::memcpy(c, send, n);
  return c;
}

}  // namespace

namespace {

/// Calls a torch collective from C++ that runs without the GIL (a blocking collective, which
/// releases it, or a started one on the communicator's progress thread). A Python exception
/// becomes a qsdp::error with its message while the GIL is held, so that nothing of Python's
/// crosses threads.
void call_torch(const nb::callable& fn, const std::byte* send, std::size_t send_bytes,
                std::byte* recv, std::size_t recv_bytes) {
  nb::gil_scoped_acquire gil;
  try {
    fn(byte_view(send, send_bytes), byte_view(recv, recv_bytes));
  } catch (nb::python_error& e) {
    throw qsdp::error(e.what());
  }
}

}  // namespace

void group_communicator::all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
  const std::size_t total = n * static_cast<std::size_t>(size_);
  send = outside(send, n, recv, total, in_place_);
  call_torch(all_gather_, send, n, recv, total);
}

void group_communicator::all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
  const std::size_t total = n * static_cast<std::size_t>(size_);
  send = outside(send, total, recv, total, in_place_);
  call_torch(all_to_all_, send, total, recv, total);
}

delta_holder::any_gather delta_holder::make(element e, std::size_t count, int world) {
  return with_element(e, [&]<class T>() {
    return any_gather(std::in_place_type<qsdp::delta_gather<T>>, count, world);
  });
}

delta_holder::delta_holder(element e, std::size_t count, int world)
    : type_(e), gather_(make(e, count, world)) {}

std::size_t delta_holder::count() const {
  return std::visit([](const auto& d) { return d.count(); }, gather_);
}
std::uint64_t delta_holder::calls() const {
  return std::visit([](const auto& d) { return d.calls(); }, gather_);
}
std::size_t delta_holder::memory_bytes() const {
  return std::visit([](const auto& d) { return d.memory_bytes(); }, gather_);
}
void delta_holder::reset() {
  std::visit([](auto& d) { d.reset(); }, gather_);
}

std::unique_ptr<policy> make_identity() {
  return std::make_unique<policy_impl<qsdp::identity>>(qsdp::identity{});
}

std::unique_ptr<policy> make_policy(const std::string& family, int bits, std::size_t bucket_size,
                                    std::uint64_t seed, bool rotated) {
  static constexpr family_factories<policy> factories{
      make_stochastic, make_uniform, make_symmetric, make_random_shift,
      make_identity,   make_mx,      make_fp4};
  return make_named(factories, family, bits, bucket_size, seed, rotated);
}

/// A started collective held by Python. Destroying an unfinished qsdp::work waits for it, and the
/// collective's exchanges need the GIL: the wait gives the GIL up.
struct started_work {
  qsdp::work work;
  started_work() = default;
  explicit started_work(qsdp::work w) : work(std::move(w)) {}
  started_work(started_work&&) noexcept = default;
  ~started_work() {
    if (!work.valid()) return;
    if (PyGILState_Check()) {
      nb::gil_scoped_release released;
      work = qsdp::work{};
    } else {
      work = qsdp::work{};
    }
  }
};

/// Waits, the GIL given up, for the collectives started on comm: its counters are theirs to write
/// until then.
inline void drain_released(group_communicator& comm, const char* where) {
  nb::gil_scoped_release released;
  comm.workspace().lane.drain(where);
}

/// Runs `call` (a collective on comm's host buffers) now, or starts it on comm's progress thread
/// and returns its work. The GIL is released: the exchanges take it (call_torch).
template <class Call>
started_work run_or_start(group_communicator& comm, Call call, bool async_op, const char* where) {
  if (!async_op) {
    call();
    return started_work{};
  }
  return started_work(qsdp::detail::start_on_lane(comm, std::move(call), where));
}

}  // namespace qsdp::python

namespace {

using qsdp::python::address;
using qsdp::python::bytes;
using qsdp::python::delta_holder;
using qsdp::python::drain_released;
using qsdp::python::element;
using qsdp::python::gate;
using qsdp::python::group_communicator;
using qsdp::python::policy;
using qsdp::python::reduce_op_from;
using qsdp::python::run_or_start;
using qsdp::python::started_work;

}  // namespace

NB_MODULE(_ext, m) {
  namespace nb = nanobind;
  m.doc() = "qsdp's C++ codec and collectives for qsdp.torch (internal; use qsdp.torch)";
  nb::exception<qsdp::error>(m, "Error", PyExc_RuntimeError);
  m.attr("has_half_types") = bool(QSDP_HAS_CUDA_HALF);
  m.attr("host_codec_isa") = qsdp::host_codec_isa();
  // Whether qsdp._ext_cuda was built, and if not why (python/CMakeLists.txt).
  m.attr("cuda_extension") = QSDP_PYTHON_CUDA_EXTENSION;
  m.attr("recommended_min_compressed_bytes") = qsdp::recommended_min_compressed_bytes;

  nb::class_<group_communicator>(m, "GroupCommunicator")
      .def(nb::init<int, int, nb::callable, nb::callable>(), nb::arg("rank"), nb::arg("size"),
           nb::arg("all_gather"), nb::arg("all_to_all"))
      .def_prop_ro("rank", &group_communicator::rank)
      .def_prop_ro("size", &group_communicator::size)
      .def_prop_ro("calls", &group_communicator::calls)
      .def("group_start", [](group_communicator& c) { qsdp::group_start(c); })
      .def(
          "group_end", [](group_communicator& c) { qsdp::group_end(c); },
          nb::call_guard<nb::gil_scoped_release>())
      .def("group_end_async",
           [](group_communicator& c) { return started_work(qsdp::group_end_async(c)); })
      .def_prop_ro("counters",
                   [](group_communicator& c) {
                     drain_released(c, "qsdp.torch.call_counters");
                     const qsdp::call_counters& n = c.workspace().counters;
                     return nb::make_tuple(n.compressed_calls, n.compressed_bytes, n.gated_calls,
                                           n.gated_bytes);
                   })
      .def_prop_ro("timings", [](group_communicator& c) {
        drain_released(c, "qsdp.torch.call_timings");
        const qsdp::call_timings& t = c.workspace().timings;
        return nb::make_tuple(t.calls_seconds, t.encode_seconds, t.decode_seconds);
      });

  nb::class_<policy>(m, "Policy")
      .def_prop_ro("name", &policy::name)
      .def_prop_ro("bucket_size", &policy::bucket_size)
      .def_prop_ro("next_call", &policy::next_call)
      .def("take_call", &policy::take_call)
      .def("compressed_size",
           [](const policy& p, int e, std::size_t count) {
             return p.compressed_size(static_cast<element>(e), count);
           })
      .def("encode",
           [](policy& p, int e, std::uintptr_t src, std::size_t count, std::uintptr_t packet) {
             p.encode(static_cast<element>(e), address(src), count, bytes(packet));
           })
      .def("decode",
           [](policy& p, int e, std::uintptr_t packet, std::size_t count, std::uintptr_t dst) {
             p.decode(static_cast<element>(e), bytes(packet), count, address(dst));
           })
      .def(
          "all_gather",
          [](policy& p, group_communicator& comm, int e, std::uintptr_t send, std::uintptr_t recv,
             std::size_t count, std::size_t min_compressed_bytes, bool async_op) {
            auto call = [&p, &comm, e, send, recv, count, min_compressed_bytes] {
              p.all_gather(comm, static_cast<element>(e), address(send), address(recv), count,
                           gate(min_compressed_bytes));
            };
            return run_or_start(comm, call, async_op, "qsdp.torch.all_gather_into_tensor");
          },
          nb::call_guard<nb::gil_scoped_release>())
      .def(
          "reduce_scatter",
          [](policy& p, group_communicator& comm, int e, std::uintptr_t send, std::uintptr_t recv,
             std::size_t count, int op, std::size_t min_compressed_bytes, bool async_op) {
            auto call = [&p, &comm, e, send, recv, count, op, min_compressed_bytes] {
              p.reduce_scatter(comm, static_cast<element>(e), address(send), address(recv), count,
                               reduce_op_from(op), gate(min_compressed_bytes));
            };
            return run_or_start(comm, call, async_op, "qsdp.torch.reduce_scatter_tensor");
          },
          nb::call_guard<nb::gil_scoped_release>())
      .def(
          "all_reduce",
          [](policy& p, group_communicator& comm, int e, std::uintptr_t data, std::size_t count,
             int op, std::size_t min_compressed_bytes, bool async_op) {
            auto call = [&p, &comm, e, data, count, op, min_compressed_bytes] {
              p.all_reduce(comm, static_cast<element>(e), address(data), count, reduce_op_from(op),
                           gate(min_compressed_bytes));
            };
            return run_or_start(comm, call, async_op, "qsdp.torch.all_reduce");
          },
          nb::call_guard<nb::gil_scoped_release>())
      .def("block_scaled_element_bytes", &policy::block_scaled_element_bytes)
      .def(
          "all_gather_encoded",
          [](policy& p, group_communicator& comm, int e, std::uintptr_t send,
             std::uintptr_t elements, std::uintptr_t scales, std::size_t count) {
            p.all_gather_encoded(comm, static_cast<element>(e), address(send), bytes(elements),
                                 reinterpret_cast<std::uint8_t*>(scales), count);
          },
          nb::call_guard<nb::gil_scoped_release>())
      .def(
          "unpack_block_scaled",
          [](policy& p, std::uintptr_t packet, std::size_t count, std::uintptr_t elements,
             std::uintptr_t scales) {
            p.unpack_block_scaled(reinterpret_cast<const std::byte*>(packet), count,
                                  bytes(elements), reinterpret_cast<std::uint8_t*>(scales));
          },
          nb::call_guard<nb::gil_scoped_release>())
      .def(
          "delta_all_gather",
          [](policy& p, delta_holder& gather, group_communicator& comm, std::uintptr_t send,
             std::uintptr_t recv) {
            p.delta_all_gather(gather, comm, address(send), address(recv));
          },
          nb::call_guard<nb::gil_scoped_release>());

  // A started collective (qsdp::work): wait() gives up the GIL while it blocks.
  nb::class_<started_work>(m, "Work")
      .def(
          "wait", [](started_work& w) { w.work.wait(); }, nb::call_guard<nb::gil_scoped_release>())
      .def("test", [](started_work& w) { return w.work.test(); })
      .def_prop_ro("valid", [](const started_work& w) { return w.work.valid(); });

  nb::class_<delta_holder>(m, "DeltaGather")
      .def("__init__",
           [](delta_holder* self, int e, std::size_t count, int world) {
             new (self) delta_holder(static_cast<element>(e), count, world);
           })
      .def_prop_ro("count", &delta_holder::count)
      .def_prop_ro("calls", &delta_holder::calls)
      .def_prop_ro("memory_bytes", &delta_holder::memory_bytes)
      .def("reset", &delta_holder::reset);

  m.def("make_policy", &qsdp::python::make_policy, nb::arg("family"), nb::arg("bits"),
        nb::arg("bucket_size"), nb::arg("seed"), nb::arg("rotated"));
  m.def("tiled_block_scales_size", &qsdp::tiled_block_scales_size);
  m.def("tile_block_scales",
        [](std::uintptr_t scales, std::size_t rows, std::size_t cols, std::uintptr_t tiled) {
          qsdp::tile_block_scales(reinterpret_cast<const std::uint8_t*>(scales), rows, cols,
                                  reinterpret_cast<std::uint8_t*>(tiled));
        });
}
