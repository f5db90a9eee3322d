# plexus_split_debug_info(<target> <install destination>)
#
# Keeps a shipped binary's debug information in a file of its own, as Debian's packages do: after
# each link the DWARF sections go to .debug/<file>.debug beside the binary, the binary keeps its
# code, its symbol table (perf and backtraces still name functions) and a .gnu_debuglink naming
# that file with its CRC. gdb and perf look for a debug link's file in the binary's folder and in
# its .debug/ subfolder, so both find it in the build tree and after `cmake --install` alike.
# Why: the full build's `plexus` is 205 MB with its debug information and 8 MB without (start-up
# is the same: the debug sections are never mapped); the installed program, the container image
# and an edge device get the small one. `cmake --install build --component debug` installs the
# debug files too (to <destination>/.debug/); a plain `cmake --install` leaves them out.
# A build without -g in its flags (the cross builds) has nothing to split and is left alone.
function(plexus_split_debug_info target destination)
  string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
  if(NOT CMAKE_OBJCOPY OR NOT " ${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${config}} " MATCHES " -g[0-9]* ")
    return()
  endif()
  set(file $<TARGET_FILE:${target}>)
  set(debug_dir $<TARGET_FILE_DIR:${target}>/.debug)
  set(debug_file ${debug_dir}/$<TARGET_FILE_NAME:${target}>.debug)
  # --add-gnu-debuglink reads the debug file and records its name (without folder) and CRC.
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E make_directory ${debug_dir}
    COMMAND ${CMAKE_OBJCOPY} --only-keep-debug ${file} ${debug_file}
    COMMAND ${CMAKE_OBJCOPY} --strip-debug --add-gnu-debuglink=${debug_file} ${file}
    VERBATIM)
  install(FILES ${debug_file} DESTINATION ${destination}/.debug COMPONENT debug EXCLUDE_FROM_ALL)
endfunction()
