#[=======================================================================[.rst:
FindNCCL
--------

Find the NVIDIA Collective Communications Library (NCCL).

Imported targets
^^^^^^^^^^^^^^^^

``NCCL::nccl``
  The NCCL library, with its include directory as usage requirement. If the
  ``CUDA::toolkit`` target exists when this module runs (i.e. the caller ran
  ``find_package(CUDAToolkit)`` first), it is added as a usage requirement too,
  because ``nccl.h`` includes ``cuda_runtime.h``.

Result variables
^^^^^^^^^^^^^^^^

``NCCL_FOUND``
  True if both ``nccl.h`` and the NCCL library were found.
``NCCL_INCLUDE_DIRS``
  Include directories needed to use NCCL.
``NCCL_LIBRARIES``
  Libraries needed to link against NCCL.
``NCCL_VERSION``
  ``<major>.<minor>.<patch>`` as read from ``nccl.h``.
``NCCL_VERSION_MAJOR``, ``NCCL_VERSION_MINOR``, ``NCCL_VERSION_PATCH``
  The individual version components.

Cache variables
^^^^^^^^^^^^^^^

``NCCL_INCLUDE_DIR``
  Directory containing ``nccl.h``.
``NCCL_LIBRARY``
  Path to the NCCL library.

Hints
^^^^^

The following locations are searched before the system default paths, in
this order. Each may be given as a CMake variable or an environment variable.

``NCCL_ROOT``
  NCCL installation prefix (``<root>/include``, ``<root>/lib``). It may also
  point at a Python ``site-packages`` directory that holds the
  ``nvidia-nccl-cu*`` wheel (``<root>/nvidia/nccl/{include,lib}``), or at the
  wheel's ``nvidia/nccl`` directory itself.
``NCCL_HOME``
  Same as ``NCCL_ROOT`` (a common convention of NCCL's own build).
``CUDAToolkit_ROOT``, ``CUDA_HOME``, ``CUDA_PATH``
  CUDA toolkit prefix; NCCL is often installed into the toolkit tree. If
  ``find_package(CUDAToolkit)`` already ran, its include and library
  directories are searched as well.

``/usr/local/cuda`` is searched last, after the system default paths.
#]=======================================================================]

include(FindPackageHandleStandardArgs)

# Collect candidate prefixes from the hint variables (CMake variable first,
# then the environment variable of the same name).
set(_nccl_prefixes)
foreach(_nccl_hint IN ITEMS NCCL_ROOT NCCL_HOME CUDAToolkit_ROOT CUDA_HOME CUDA_PATH)
  if(DEFINED ${_nccl_hint} AND NOT "${${_nccl_hint}}" STREQUAL "")
    list(APPEND _nccl_prefixes "${${_nccl_hint}}")
  endif()
  if(DEFINED ENV{${_nccl_hint}} AND NOT "$ENV{${_nccl_hint}}" STREQUAL "")
    file(TO_CMAKE_PATH "$ENV{${_nccl_hint}}" _nccl_env_path)
    list(APPEND _nccl_prefixes "${_nccl_env_path}")
  endif()
endforeach()

# If the CUDA toolkit was already found, look next to it as well.
set(_nccl_include_hints)
set(_nccl_library_hints)
if(CUDAToolkit_FOUND)
  list(APPEND _nccl_include_hints ${CUDAToolkit_INCLUDE_DIRS})
  list(APPEND _nccl_library_hints ${CUDAToolkit_LIBRARY_DIR})
  if(CUDAToolkit_LIBRARY_ROOT)
    list(APPEND _nccl_prefixes "${CUDAToolkit_LIBRARY_ROOT}")
  endif()
endif()
list(REMOVE_DUPLICATES _nccl_prefixes)

# Suffixes cover a regular prefix layout and the pip wheel layout, with the
# hint pointing at site-packages (nvidia/nccl/...) or at nvidia/nccl itself.
find_path(NCCL_INCLUDE_DIR
  NAMES nccl.h
  HINTS ${_nccl_prefixes} ${_nccl_include_hints}
  PATH_SUFFIXES include nvidia/nccl/include
  PATHS /usr/local/cuda
  DOC "Directory containing nccl.h")

# The wheel ships only the versioned soname (libnccl.so.2), hence the explicit
# file name after the plain library name. NAMES_PER_DIR: a directory earlier in
# the search order wins, whichever of the names it provides.
find_library(NCCL_LIBRARY
  NAMES nccl libnccl.so.2
  NAMES_PER_DIR
  HINTS ${_nccl_prefixes} ${_nccl_library_hints}
  PATH_SUFFIXES lib lib64 lib/x64 nvidia/nccl/lib
  PATHS /usr/local/cuda
  DOC "Path to the NCCL library")

# Read the version from the header.
unset(NCCL_VERSION)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines
       REGEX "^#define[ \t]+NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  foreach(_nccl_part IN ITEMS MAJOR MINOR PATCH)
    set(NCCL_VERSION_${_nccl_part} "")
    foreach(_nccl_line IN LISTS _nccl_version_lines)
      if(_nccl_line MATCHES "^#define[ \t]+NCCL_${_nccl_part}[ \t]+([0-9]+)")
        set(NCCL_VERSION_${_nccl_part} "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  endforeach()
  if(NOT "${NCCL_VERSION_MAJOR}" STREQUAL "" AND NOT "${NCCL_VERSION_MINOR}" STREQUAL ""
     AND NOT "${NCCL_VERSION_PATCH}" STREQUAL "")
    set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
  endif()
endif()

find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND)
  set(NCCL_INCLUDE_DIRS "${NCCL_INCLUDE_DIR}")
  set(NCCL_LIBRARIES "${NCCL_LIBRARY}")

  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    if(TARGET CUDA::toolkit)
      set_property(TARGET NCCL::nccl APPEND PROPERTY INTERFACE_LINK_LIBRARIES CUDA::toolkit)
    endif()
  endif()
endif()

mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

unset(_nccl_prefixes)
unset(_nccl_include_hints)
unset(_nccl_library_hints)
unset(_nccl_hint)
unset(_nccl_env_path)
unset(_nccl_version_lines)
unset(_nccl_line)
unset(_nccl_part)
