# libunistring (Debian: libunistring-dev) as the imported target
# unistring::unistring. It ships no pkg-config file, so header and library are
# looked up directly.
if(NOT TARGET unistring::unistring)
  find_path(UNISTRING_INCLUDE_DIR uninorm.h)
  find_library(UNISTRING_LIBRARY unistring)
  if(NOT UNISTRING_INCLUDE_DIR OR NOT UNISTRING_LIBRARY)
    message(FATAL_ERROR "libunistring not found (Debian: apt-get install libunistring-dev)")
  endif()
  add_library(unistring::unistring UNKNOWN IMPORTED)
  set_target_properties(unistring::unistring PROPERTIES
    IMPORTED_LOCATION "${UNISTRING_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${UNISTRING_INCLUDE_DIR}")
endif()
