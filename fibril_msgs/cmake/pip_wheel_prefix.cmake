# Injected with -DCMAKE_PROJECT_INCLUDE=... by scikit-build-core (see ../pyproject.toml) when
# fibril_msgs is built with `pip install ./fibril_msgs`, and when scripts/bootstrap.sh builds
# the vendored ROS 2 interface packages (scripts/ros_interfaces/pyproject.toml.in). Never used
# by colcon/ament.
#
# The ROS 2 wheels on PyPI install a ROS prefix (share/, lib/, include/) into the Python
# environment's data directory. This file makes that prefix visible as if it were a sourced
# ROS underlay, and repairs what the wheels export for a machine other than their build host.

# 1. Locate the prefix from the `ament_package` Python module:
#    <prefix>/lib/pythonX.Y/site-packages/ament_package/__init__.py -> <prefix>.
#    (With pip's build isolation that prefix is the temporary build environment.)
if(NOT Python_EXECUTABLE)
  find_package(Python COMPONENTS Interpreter REQUIRED)
endif()
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import ament_package, pathlib; print(pathlib.Path(ament_package.__file__).resolve().parents[4])"
  OUTPUT_VARIABLE _fibril_ros_prefix
  OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _fibril_result)
if(NOT _fibril_result EQUAL 0 OR NOT EXISTS "${_fibril_ros_prefix}/share/ament_cmake_core")
  message(FATAL_ERROR
    "${PROJECT_NAME}: cannot find the ROS 2 wheels' prefix (python module ament_package / "
    "share/ament_cmake_core) for ${Python_EXECUTABLE}; install the build requirements "
    "listed in the package's pyproject.toml")
endif()
message(STATUS "${PROJECT_NAME}: using ROS 2 wheels prefix ${_fibril_ros_prefix}")

list(PREPEND CMAKE_PREFIX_PATH "${_fibril_ros_prefix}")
if(DEFINED ENV{AMENT_PREFIX_PATH} AND NOT "$ENV{AMENT_PREFIX_PATH}" STREQUAL "")
  set(ENV{AMENT_PREFIX_PATH} "${_fibril_ros_prefix}:$ENV{AMENT_PREFIX_PATH}")
else()
  set(ENV{AMENT_PREFIX_PATH} "${_fibril_ros_prefix}")
endif()
# The generators' Python modules and the libraries they load must come from the same prefix.
set(ENV{PYTHONPATH} "${_fibril_ros_prefix}/lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/site-packages:$ENV{PYTHONPATH}")
set(ENV{LD_LIBRARY_PATH} "${_fibril_ros_prefix}/lib:$ENV{LD_LIBRARY_PATH}")

# Generated Python code must be compiled for the interpreter doing the build.
set(Python3_EXECUTABLE "${Python_EXECUTABLE}")
set(PYTHON_EXECUTABLE "${Python_EXECUTABLE}")

# No tests, no linters in a wheel build.
set(BUILD_TESTING OFF CACHE BOOL "" FORCE)

# 2. The wheels' exported *__rosidl_generator_py targets carry the include directories of the
#    machine the wheels were built on (/opt/python/...), which CMake rejects for imported
#    targets at generate time. Drop every non-existent include dir from imported targets once
#    the whole CMakeLists.txt has run.
function(_fibril_drop_missing_imported_includes)
  get_property(_targets DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY IMPORTED_TARGETS)
  foreach(_target IN LISTS _targets)
    get_target_property(_dirs "${_target}" INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT _dirs)
      continue()
    endif()
    set(_kept "")
    foreach(_dir IN LISTS _dirs)
      if(_dir MATCHES "^\\$<" OR EXISTS "${_dir}")
        list(APPEND _kept "${_dir}")
      endif()
    endforeach()
    set_target_properties("${_target}" PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_kept}")
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _fibril_drop_missing_imported_includes)
