# Every tests/test_*.c is a test executable, every tests/test_*.sh a CLI test.
# Tests find the binary, the sources and ../shared through the environment.
set(PT_TEST_ENV
  "PORTATRAIN=$<TARGET_FILE:portatrain>"
  "PT_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
  "PT_SHARED_DIR=${CMAKE_SOURCE_DIR}/../shared"
  "PT_BUILD_DIR=${CMAKE_BINARY_DIR}"
  "OMP_NUM_THREADS=2"
  # ctest -j2 runs two 2-thread tests on 2 cores: OpenMP's default spin-wait then burns the other test's
  # core at every barrier (measured: a pair of ASan tests 42.7 s -> 16.0 s wall with PASSIVE). Results
  # do not depend on it; benchmarks run outside ctest and keep the default.
  "OMP_WAIT_POLICY=PASSIVE")
# Sanitized builds run the reference backend ~10x slower; long end-to-end
# tests use it to pick shorter or faster set-ups (and say so).
if(PT_SANITIZE)
  list(APPEND PT_TEST_ENV "PT_SANITIZED=1")
endif()

file(GLOB c_tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
list(FILTER c_tests EXCLUDE REGEX "/test_backend_parity\\.c$")  # takes a backend spec: below
foreach(src ${c_tests})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/tests/testutil.c ${CMAKE_SOURCE_DIR}/tests/testtrain.c)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE pt_all)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${PT_TEST_ENV}" TIMEOUT 900)
endforeach()

set(PT_NO_SANITIZER_TESTS test_report_chromium)
file(GLOB sh_tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.sh)
foreach(src ${sh_tests})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME ${name} COMMAND bash ${src})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${PT_TEST_ENV}" TIMEOUT 900)
  # Tests that drive external programs (headless Chromium) skip the ASan run.
  if(name IN_LIST PT_NO_SANITIZER_TESTS)
    set_tests_properties(${name} PROPERTIES LABELS no-sanitizer)
  endif()
endforeach()

# GPU tests (NCCL, the cuda CLI): exit 77 = skipped, with the reason
# ("no CUDA device", no cuda-sim backend in this build, mpirun missing).
foreach(t test_nccl test_cuda_cli)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77 LABELS no-sanitizer)
  endif()
endforeach()

# The double-precision gradient check: the model and reference kernels compiled
# again with real_t = double (src/util/common.h).
file(GLOB gc_srcs CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/src/util/*.c ${CMAKE_SOURCE_DIR}/src/backend/cpu_ref.c
  ${CMAKE_SOURCE_DIR}/src/backend/backend.c ${CMAKE_SOURCE_DIR}/src/model/*.c)
add_executable(gradcheck_double ${CMAKE_SOURCE_DIR}/tests/gradcheck.c ${CMAKE_SOURCE_DIR}/tests/testutil.c ${gc_srcs})
target_compile_definitions(gradcheck_double PRIVATE PT_REAL_DOUBLE PT_BACKEND_REF_ONLY)
target_include_directories(gradcheck_double PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(gradcheck_double PRIVATE PkgConfig::CJSON OpenSSL::Crypto OpenMP::OpenMP_C ${MATH_LIB})
# One executable, two tests: the dense model, and Qwen3-MoE (routers, experts and the load-balancing loss).
add_test(NAME gradcheck_double COMMAND gradcheck_double dense)
add_test(NAME gradcheck_moe_double COMMAND gradcheck_double moe)
set_tests_properties(gradcheck_double gradcheck_moe_double PROPERTIES ENVIRONMENT "${PT_TEST_ENV}" TIMEOUT 900)

# Backends against cpu-ref (tests/test_backend_parity.c SPEC), one test per
# backend: cpu, opencl, cuda-sim (the cuda kernels on the host emulator) and
# cuda (a GPU). Exit 77 = skipped: no OpenCL platform, no CUDA device, or the
# backend not built. test_backend_parity_opencl passes under ASan/UBSan with
# PoCL (checked with PT_SANITIZE=ON); test_opencl_cli is labelled no-sanitizer
# because its accept run, with a sanitized cpu-ref baseline, would take many
# minutes there, and it adds no backend code paths.
add_executable(test_backend_parity ${CMAKE_SOURCE_DIR}/tests/test_backend_parity.c ${CMAKE_SOURCE_DIR}/tests/testutil.c
               ${CMAKE_SOURCE_DIR}/tests/testtrain.c)
target_include_directories(test_backend_parity PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(test_backend_parity PRIVATE pt_all)
foreach(spec cpu opencl cuda-sim cuda)
  string(REPLACE "-" "_" tname "test_backend_parity_${spec}")
  add_test(NAME ${tname} COMMAND test_backend_parity ${spec})
  set_tests_properties(${tname} PROPERTIES ENVIRONMENT "${PT_TEST_ENV}" TIMEOUT 900 SKIP_RETURN_CODE 77)
endforeach()
if(TEST test_opencl_cli)
  set_tests_properties(test_opencl_cli PROPERTIES SKIP_RETURN_CODE 77 LABELS no-sanitizer)
endif()
# cuda-sim again in another order: blocks and threads reversed
# (PT_CUDA_SIM_REVERSE=1: an order-dependent kernel, a race on a GPU, fails)
# and GEMM sums split-K with FMAs (PT_CUDA_SIM_GEMM=splitk: a summation order
# unlike cpu-ref's, as cuBLAS's is, so the tolerances are tried on one).
add_test(NAME test_backend_parity_cuda_sim_reordered COMMAND test_backend_parity cuda-sim)
set_tests_properties(test_backend_parity_cuda_sim_reordered PROPERTIES
  ENVIRONMENT "${PT_TEST_ENV};PT_CUDA_SIM_REVERSE=1;PT_CUDA_SIM_GEMM=splitk" TIMEOUT 900 SKIP_RETURN_CODE 77)

# The CUDA emulator's own test (C++: kernels written against cuda_compat.h).
add_executable(test_cuda_sim ${CMAKE_SOURCE_DIR}/tests/test_cuda_sim.cc)
target_link_libraries(test_cuda_sim PRIVATE pt_cuda_sim)
add_test(NAME test_cuda_sim COMMAND test_cuda_sim)
set_tests_properties(test_cuda_sim PROPERTIES ENVIRONMENT "${PT_TEST_ENV}" TIMEOUT 900)
