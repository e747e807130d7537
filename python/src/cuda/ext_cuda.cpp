// SPDX-License-Identifier: Apache-2.0
//
// The qsdp._ext_cuda module (compiled by the host compiler; the kernels are in the .cu files):
// device policies and the device communicator over a ProcessGroup as Python classes. qsdp::error
// is raised as qsdp._ext.Error, the one qsdp.Error of both extensions. Streams and tensors arrive
// as integers (torch.cuda.Stream.cuda_stream, Tensor.data_ptr()), checked by python/qsdp/torch.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <cstdint>
#include <exception>
#include <utility>

#include "device_ext.hpp"

namespace {

namespace nb = nanobind;
using qsdp::python::address;
using qsdp::python::bytes;
using qsdp::python::device_exchange;
using qsdp::python::device_group_communicator;
using qsdp::python::device_policy;
using qsdp::python::element;
using qsdp::python::gate;
using qsdp::python::reduce_op_from;

/// A uint8 torch CUDA tensor viewing n bytes at `data` on `device` (no copy, no owner: valid
/// during the call). A view made through DLPack is not the caching allocator's, so
/// ProcessGroupNCCL does not record streams on it; the library's scratch outlives the call.
nb::object device_byte_view(const std::byte* data, std::size_t n, int device) {
  using view = nb::ndarray<nb::pytorch, std::uint8_t, nb::ndim<1>, nb::device::cuda>;
  const std::size_t shape[1] = {n};
  return nb::cast(view(const_cast<std::byte*>(data), 1, shape, nb::handle(), nullptr,
                       nb::dtype<std::uint8_t>(), nb::device::cuda::value, device),
                  nb::rv_policy::reference);
}

/// An exchange that calls fn(send_view, recv_view) (the GIL is held: every call comes from Python).
device_exchange exchange_through(nb::callable fn, int device) {
  return [fn = std::move(fn), device](const std::byte* send, std::size_t send_bytes,
                                      std::byte* recv, std::size_t recv_bytes) {
    fn(device_byte_view(send, send_bytes, device), device_byte_view(recv, recv_bytes, device));
  };
}

cudaStream_t stream_from(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace

NB_MODULE(_ext_cuda, m) {
  m.doc() = "qsdp's CUDA codec and collectives for qsdp.torch (internal; use qsdp.torch)";
  // qsdp::error becomes the host extension's Error class, so that `except qsdp.Error` catches
  // both. The reference is kept for the life of the process (translators are never removed).
  nb::object error_type = nb::module_::import_("qsdp._ext").attr("Error");
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* type) {
        try {
          std::rethrow_exception(p);
        } catch (const qsdp::error& e) {
          PyErr_SetString(static_cast<PyObject*>(type), e.what());
        }
      },
      error_type.release().ptr());
  int runtime = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  m.attr("cuda_runtime_version") = runtime;

  nb::class_<device_group_communicator>(m, "DeviceGroupCommunicator")
      .def("__init__",
           [](device_group_communicator* self, int rank, int size, int device,
              nb::callable all_gather, nb::callable all_to_all) {
             new (self) device_group_communicator(rank, size, device,
                                                  exchange_through(std::move(all_gather), device),
                                                  exchange_through(std::move(all_to_all), device));
           })
      .def_prop_ro("rank", &device_group_communicator::rank)
      .def_prop_ro("size", &device_group_communicator::size)
      .def_prop_ro("device", &device_group_communicator::device)
      .def_prop_ro("calls", &device_group_communicator::calls)
      .def("check_failures",
           [](device_group_communicator& c) { c.check_failures("qsdp.torch.synchronize"); })
      .def("group_start", &device_group_communicator::group_start)
      .def("group_end",
           [](device_group_communicator& c, std::uintptr_t stream) {
             c.use_stream(stream_from(stream));
             c.group_end();
           })
      .def_prop_ro("counters", [](device_group_communicator& c) {
        const qsdp::call_counters& n = c.state().counters;
        return nb::make_tuple(n.compressed_calls, n.compressed_bytes, n.gated_calls, n.gated_bytes);
      });

  nb::class_<device_policy>(m, "DevicePolicy")
      .def_prop_ro("name", &device_policy::name)
      .def("encode",
           [](device_policy& p, int e, std::uintptr_t src, std::size_t count, std::uintptr_t packet,
              std::uint64_t call, std::uintptr_t stream) {
             p.encode(static_cast<element>(e), address(src), count, bytes(packet), call,
                      stream_from(stream));
           })
      .def("decode",
           [](device_policy& p, int e, std::uintptr_t packet, std::size_t count, std::uintptr_t dst,
              std::uintptr_t stream) {
             p.decode(static_cast<element>(e), bytes(packet), count, address(dst),
                      stream_from(stream));
           })
      .def("all_gather_encoded",
           [](device_policy& p, device_group_communicator& comm, int e, std::uintptr_t send,
              std::uintptr_t elements, std::uintptr_t scales, std::size_t count,
              std::uintptr_t stream) {
             comm.use_stream(stream_from(stream));
             p.all_gather_encoded(comm, static_cast<element>(e), address(send), bytes(elements),
                                  reinterpret_cast<std::uint8_t*>(scales), count,
                                  stream_from(stream));
           })
      .def("unpack_block_scaled",
           [](device_policy& p, std::uintptr_t packet, std::size_t count, std::uintptr_t elements,
              std::uintptr_t scales, std::uintptr_t stream) {
             p.unpack_block_scaled(bytes(packet), count, bytes(elements),
                                   reinterpret_cast<std::uint8_t*>(scales), stream_from(stream));
           })
      .def("all_gather",
           [](device_policy& p, device_group_communicator& comm, int e, std::uintptr_t send,
              std::uintptr_t recv, std::size_t count, std::uintptr_t stream,
              std::size_t min_compressed_bytes) {
             comm.use_stream(stream_from(stream));
             p.all_gather(comm, static_cast<element>(e), address(send), address(recv), count,
                          stream_from(stream), gate(min_compressed_bytes));
           })
      .def("reduce_scatter",
           [](device_policy& p, device_group_communicator& comm, int e, std::uintptr_t send,
              std::uintptr_t recv, std::size_t count, int op, std::uintptr_t stream,
              std::size_t min_compressed_bytes) {
             comm.use_stream(stream_from(stream));
             p.reduce_scatter(comm, static_cast<element>(e), address(send), address(recv), count,
                              reduce_op_from(op), stream_from(stream), gate(min_compressed_bytes));
           })
      .def("all_reduce",
           [](device_policy& p, device_group_communicator& comm, int e, std::uintptr_t data,
              std::size_t count, int op, std::uintptr_t stream, std::size_t min_compressed_bytes) {
             comm.use_stream(stream_from(stream));
             p.all_reduce(comm, static_cast<element>(e), address(data), count, reduce_op_from(op),
                          stream_from(stream), gate(min_compressed_bytes));
           });

  m.def("make_policy", &qsdp::python::make_device_policy, nb::arg("family"), nb::arg("bits"),
        nb::arg("bucket_size"), nb::arg("seed"), nb::arg("rotated"));
  m.def("synchronize_and_check", [](std::uintptr_t stream) {
    qsdp::python::device_synchronize_and_check(stream_from(stream));
  });
}
