#include <stdio.h>
#include <unilink/unilink.h>
int main(void) {
  ul_unique_id_t id;
  ul_comm_t c;
  float x = 2.5f, y = 0;
  if (ul_get_unique_id("host", &id) != UL_OK || ul_comm_init_rank(&c, NULL, 1, id, 0) != UL_OK) return 1;
  if (ul_allreduce(&x, &y, 1, UL_FP32, UL_SUM, c, NULL) != UL_OK || y != 2.5f) return 1;
  ul_comm_destroy(c);
  printf("consumer ok (unilink %s)\n", ul_version_string());
  return 0;
}
