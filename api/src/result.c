/* Result codes and the version string. Names and messages are generated from
 * UL_RESULT_MAP so that adding a code never needs a second hand-written list. */
#include "ul_core.h"

#define UL__STR2(x) #x
#define UL__STR(x) UL__STR2(x)

const char *ul_result_name(ul_result_t result) {
  /* A switch (not a table) so that a duplicated value in the map fails to compile. */
  switch (result) {
#define UL__RESULT_NAME_CASE(name, value, msg) \
  case name:                                   \
    return #name;
    UL_RESULT_MAP(UL__RESULT_NAME_CASE)
#undef UL__RESULT_NAME_CASE
  }
  return "UL_UNKNOWN_RESULT";
}

const char *ul_result_string(ul_result_t result) {
  switch (result) {
#define UL__RESULT_MSG_CASE(name, value, msg) \
  case name:                                  \
    return msg;
    UL_RESULT_MAP(UL__RESULT_MSG_CASE)
#undef UL__RESULT_MSG_CASE
  }
  return "unknown result code";
}

const char *ul_version_string(void) {
  return UL__STR(UL_VERSION_MAJOR) "." UL__STR(UL_VERSION_MINOR) "." UL__STR(UL_VERSION_PATCH);
}
