/* Flight recorder: the last UL__FLIGHT_LEN operations of a rank on a communicator. A
 * timeout's sentence ends with the latest of them, and UNILINK_DUMP_ON_TIMEOUT writes all
 * of them with the error as JSON (the idea of PyTorch's TORCH_NCCL_DUMP_ON_TIMEOUT): with
 * every rank's file side by side, the rank that never entered an operation stands out. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ul_core.h"

static int64_t flight_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void ul__flight_begin(ul_comm_t c, uint64_t seq, ul_coll_t coll, size_t bytes) {
  ul__flight_entry_t *e = &c->flight.e[c->flight.n % UL__FLIGHT_LEN];
  e->seq = seq;
  e->coll = coll;
  e->bytes = bytes;
  e->start_ms = flight_now_ms();
  e->end_ms = 0;
  e->rc = UL_IN_PROGRESS;
  e->algorithm[0] = '\0';
  c->flight.n++;
}

void ul__flight_end(ul_comm_t c, ul_result_t rc, const ul_call_info_t *info) {
  if (c->flight.n == 0) return;
  ul__flight_entry_t *e = &c->flight.e[(c->flight.n - 1) % UL__FLIGHT_LEN];
  if (e->seq != info->sequence) return;
  e->end_ms = flight_now_ms();
  e->rc = rc;
  if (info->bytes) e->bytes = info->bytes;
  /* a fixed-size copy, no strlen: bytes after a terminator are never read */
  _Static_assert(sizeof e->algorithm <= sizeof info->algorithm, "flight algorithm too long");
  memcpy(e->algorithm, info->algorithm, sizeof e->algorithm);
  e->algorithm[sizeof e->algorithm - 1] = '\0';
}

static const char *flight_state(ul_result_t rc) {
  return rc == UL_OK ? "ok" : rc == UL_IN_PROGRESS ? "running" : ul_result_name(rc);
}

void ul__flight_summary(const ul_comm_t c, int n, char *buf, size_t len) {
  size_t w = 0;
  buf[0] = '\0';
  uint64_t total = c->flight.n, first = total > (uint64_t)n ? total - (uint64_t)n : 0;
  for (uint64_t i = first; i < total && w + 1 < len; i++) {
    const ul__flight_entry_t *e = &c->flight.e[i % UL__FLIGHT_LEN];
    int64_t dur = (e->end_ms ? e->end_ms : flight_now_ms()) - e->start_ms;
    int k = snprintf(buf + w, len - w, "%s%s #%llu %zu B %s %lld ms", w ? ", " : "",
                     ul_coll_name(e->coll), (unsigned long long)e->seq, e->bytes,
                     flight_state(e->rc), (long long)dur);
    if (k < 0) break;
    w += (size_t)k;
  }
}

/* JSON string body: quotes, backslashes and control characters escaped. */
static void flight_json_str(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
}

void ul__flight_dump(ul_comm_t c) {
  const char *prefix = ul__param_str("DUMP_ON_TIMEOUT", "", NULL);
  if (!prefix || !prefix[0]) return;
  char path[4096];
  snprintf(path, sizeof path, "%s%d", prefix, c->rank);
  FILE *f = fopen(path, "w");
  if (!f) {
    UL_WARN("ERROR", "UNILINK_DUMP_ON_TIMEOUT: cannot write %s", path);
    return;
  }
  int64_t now = flight_now_ms();
  fprintf(f, "{\"rank\": %d, \"nranks\": %d, \"backend\": \"", c->rank, c->nranks);
  flight_json_str(f, c->backend->ops.name);
  fprintf(f, "\", \"error\": \"");
  flight_json_str(f, c->last_error);
  fprintf(f, "\", \"ops\": [");
  uint64_t total = c->flight.n, first = total > UL__FLIGHT_LEN ? total - UL__FLIGHT_LEN : 0;
  for (uint64_t i = first; i < total; i++) {
    const ul__flight_entry_t *e = &c->flight.e[i % UL__FLIGHT_LEN];
    fprintf(f,
            "%s\n  {\"seq\": %llu, \"coll\": \"%s\", \"bytes\": %zu, \"algorithm\": \"%s\", "
            "\"state\": \"%s\", \"started_ms_ago\": %lld, \"duration_ms\": %lld}",
            i > first ? "," : "", (unsigned long long)e->seq, ul_coll_name(e->coll), e->bytes,
            e->algorithm, flight_state(e->rc), (long long)(now - e->start_ms),
            (long long)((e->end_ms ? e->end_ms : now) - e->start_ms));
  }
  fprintf(f, "\n]}\n");
  fclose(f);
  UL_WARN("ERROR", "rank %d: recent operations written to %s", c->rank, path);
}
