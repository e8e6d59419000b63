/* One-sided: put, get and signals on windows of ul_mem_alloc memory. */
#include <stdlib.h>

#include "cases.h"

static const char *os_names[] = {"put", "get", "signal"};

void cf_expand_onesided(const cf_case_t *c, int n, const cf_opts_t *o,
                        const ul_backend_info_t *info, cf_emit_fn emit, void *arg) {
  if (c->variant == CF_OS_SIGNAL) {
    cf_inst_t in = cf_proto(c);
    snprintf(in.name, sizeof in.name, "onesided/signal");
    emit(arg, &in);
    return;
  }
  size_t full[] = {1, 1023, 65537}, quick[] = {1023};
  int nc = o->quick ? 1 : 3;
  for (int i = 0; i < nc; i++) {
    cf_inst_t in = cf_proto(c);
    in.count = o->quick ? quick[i] : full[i];
    snprintf(in.name, sizeof in.name, "onesided/%s/bytes=%zu", os_names[c->variant], in.count);
    emit(arg, &in);
  }
}

typedef struct os_win {
  void *base;
  size_t size;
  ul_window_t win;
} os_win_t;

/* `g` fills the local window before registration (registration is collective, so no
 * peer can touch it earlier); without it the window is poisoned. The memory is from
 * ul_mem_alloc (cf_alloc_window), staged through its host shadow and released by
 * cf_free_all after the case. */
static int os_open(cf_ctx_t *ctx, os_win_t *w, size_t size, const cf_gen_t *g) {
  w->size = size;
  w->base = NULL;
  w->win = NULL;
  w->base = cf_alloc_window(ctx, size);
  if (!w->base) return -1;
  if (g ? cf_fill(ctx, g, ctx->rank, 0, size, w->base) : cf_poison(ctx, w->base, size)) return -1;
  if (cf_check_rc(ctx, ul_window_register(ctx->comm, w->base, size, &w->win),
                  "ul_window_register"))
    return -1;
  return 0;
}

static void os_close(cf_ctx_t *ctx, os_win_t *w) {
  if (w->win) cf_check_rc(ctx, ul_window_deregister(w->win), "ul_window_deregister");
}

void cf_case_onesided(cf_ctx_t *ctx) {
  const cf_inst_t *in = ctx->inst;
  int n = ctx->nranks, r = ctx->rank;
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  size_t chunk = in->count;
  cf_gen_t g;
  cf_gen_init(&g, UL_UINT8, -1, n, ctx->seed);
  os_win_t w;
  if (in->variant == CF_OS_PUT) {
    /* Rank r writes its chunk into slot r of the next rank's window (the last rank's
     * slot ends exactly at the window's end), then signals it. */
    size_t size = chunk * (size_t)n;
    if (os_open(ctx, &w, size, NULL)) return;
    unsigned char *src = cf_alloc(ctx, chunk);
    if (src && !cf_fill(ctx, &g, r, 0, chunk, src)) {
      if (!cf_check_rc(ctx, ul_put(src, chunk, next, w.win, (size_t)r * chunk, NULL), "ul_put") &&
          !cf_check_rc(ctx, ul_signal(next, w.win, 0, NULL), "ul_signal") &&
          !cf_check_rc(ctx, ul_wait_signal(w.win, 0, 1, NULL), "ul_wait_signal")) {
        cf_exp_t x = {.g = &g, .rank = prev};
        unsigned char *slot = (unsigned char *)w.base + (size_t)prev * chunk;
        cf_verify(ctx, "window slot written by the previous rank", slot, chunk, UL_UINT8,
                  cf_exp_input, &x, 0);
        for (int s = 0; s < n; s++)
          if (s != prev &&
              cf_check_poison(ctx, "window slot nobody wrote", (unsigned char *)w.base + (size_t)s * chunk, chunk))
            break;
      }
    }
    os_close(ctx, &w);
  } else if (in->variant == CF_OS_GET) {
    size_t size = chunk * (size_t)n;
    if (os_open(ctx, &w, size, &g)) return;
    unsigned char *dst = cf_alloc(ctx, size), *last = cf_alloc(ctx, chunk);
    if (dst && last && !cf_poison(ctx, dst, size) && !cf_poison(ctx, last, chunk)) {
      cf_exp_t x = {.g = &g, .rank = next};
      if (!cf_check_rc(ctx, ul_get(dst, size, next, w.win, 0, NULL), "ul_get (whole window)"))
        cf_verify(ctx, "whole window read from the next rank", dst, size, UL_UINT8, cf_exp_input,
                  &x, 0);
      size_t off = (size_t)(n - 1) * chunk;
      if (!cf_check_rc(ctx, ul_get(last, chunk, next, w.win, off, NULL), "ul_get (last slot)")) {
        cf_exp_t y = {.g = &g, .rank = next, .base = off};
        cf_verify(ctx, "last slot read from the next rank", last, chunk, UL_UINT8, cf_exp_input,
                  &y, 0);
      }
      cf_check_guard(ctx, "get destination", dst, size);
    }
    os_close(ctx, &w);
  } else {
    /* Every rank signals every rank (itself included) on slot `rank % 64` and on the last
     * slot; a second round on the last slot checks that counts accumulate. */
    if (os_open(ctx, &w, 64, NULL)) return;
    uint64_t expect[UL_WINDOW_SIGNALS] = {0};
    for (int s = 0; s < n; s++) expect[s % UL_WINDOW_SIGNALS]++;
    expect[UL_WINDOW_SIGNALS - 1] += (uint64_t)n;
    int ok = 1;
    for (int p = 0; p < n && ok; p++)
      ok = !cf_check_rc(ctx, ul_signal(p, w.win, r % UL_WINDOW_SIGNALS, NULL), "ul_signal") &&
           !cf_check_rc(ctx, ul_signal(p, w.win, UL_WINDOW_SIGNALS - 1, NULL), "ul_signal (last)");
    for (int i = 0; i < UL_WINDOW_SIGNALS && ok; i++)
      if (expect[i]) ok = !cf_check_rc(ctx, ul_wait_signal(w.win, i, expect[i], NULL), "ul_wait_signal");
    for (int p = 0; p < n && ok; p++)
      ok = !cf_check_rc(ctx, ul_signal(p, w.win, UL_WINDOW_SIGNALS - 1, NULL), "ul_signal (round 2)");
    if (ok)
      cf_check_rc(ctx, ul_wait_signal(w.win, UL_WINDOW_SIGNALS - 1, expect[UL_WINDOW_SIGNALS - 1] + (uint64_t)n, NULL),
                  "ul_wait_signal (accumulated)");
    os_close(ctx, &w);
  }
}
