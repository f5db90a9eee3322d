# plexus_add_test(NAME <name> SOURCES <files...> LIBS <targets...> LABELS unit|integration|slow)
# One GoogleTest executable per suite, registered with ctest under its labels.
function(plexus_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} plexus_testing GTest::gtest_main GTest::gmock)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}"
    ENVIRONMENT "PLEXUS_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMP_NUM_THREADS=1")
endfunction()
