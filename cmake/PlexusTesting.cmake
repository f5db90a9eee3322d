# plexus_add_test(NAME <name> SOURCES <files...> LIBS <targets...> LABELS unit|integration|slow
#                 [DISCOVER] [ENVIRONMENT VAR=value])   (default OMP_NUM_THREADS=1)
# One GoogleTest executable per suite, registered with ctest under its labels: as one ctest test,
# or with DISCOVER as one ctest test per test case (listed when ctest runs), so that a test case
# that skips (GTEST_SKIP: a missing data set or tool) shows as skipped, not as passed. Suites
# with tests that can skip use DISCOVER.
include(GoogleTest)

function(plexus_add_test)
  cmake_parse_arguments(T "DISCOVER" "NAME;ENVIRONMENT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} plexus_testing GTest::gtest_main GTest::gmock)
  set(environment "OMP_NUM_THREADS=1")
  if(T_ENVIRONMENT)
    set(environment "${T_ENVIRONMENT}")
  endif()
  if(T_DISCOVER)
    plexus_discover_tests(${T_NAME} "" "${T_LABELS}" "${environment}")
  else()
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" ENVIRONMENT "${environment}")
  endif()
endfunction()

# Registers each test case of `target` as a ctest test named PREFIX<Suite.Case> (gtest_discover_tests
# marks one that prints GoogleTest's "[  SKIPPED ]" as skipped), with one VAR=value in its environment (gtest_discover_tests of CMake 3.25 writes a list
# property's items as separate arguments, so only one survives). Call it again with another
# prefix to run the same cases under other labels or another variable.
function(plexus_discover_tests target prefix labels environment)
  gtest_discover_tests(${target}
    TEST_PREFIX "${prefix}"
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${labels}" ENVIRONMENT "${environment}")
endfunction()
