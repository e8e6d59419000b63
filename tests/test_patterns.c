/* Rank arithmetic of the generic algorithms: binomial trees, ring reduce-scatter and
 * allgather schedules (simulated), recursive doubling, block splits. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "ul_core.h"

#define MAXN 64

Test(patterns, tree_is_spanning_and_consistent, .timeout = 30) {
  for (int n = 1; n <= MAXN; n++) {
    for (int root = 0; root < n; root++) {
      cr_assert_eq(ul__tree_parent(root, root, n), -1);
      int seen[MAXN] = {0};
      int queue[MAXN], head = 0, tail = 0;
      queue[tail++] = root;
      seen[root] = 1;
      while (head < tail) {
        int r = queue[head++];
        int kids[MAXN];
        int cnt = ul__tree_children(r, root, n, kids, MAXN);
        cr_assert(cnt >= 0 && cnt < n);
        int rel = (r - root + n) % n, prev_d = 0;
        for (int i = 0; i < cnt; i++) {
          int c = kids[i];
          cr_assert(c >= 0 && c < n, "n=%d root=%d: child %d out of range", n, root, c);
          cr_assert(!seen[c], "n=%d root=%d: rank %d reached twice", n, root, c);
          seen[c] = 1;
          queue[tail++] = c;
          cr_assert_eq(ul__tree_parent(c, root, n), r, "n=%d root=%d: parent(%d) != %d", n,
                       root, c, r);
          /* ascending powers of two below the lowest set bit of rel */
          int d = (c - root + n) % n - rel;
          cr_assert(d > prev_d && (d & (d - 1)) == 0, "n=%d root=%d rank %d: child order", n,
                    root, r);
          cr_assert(rel == 0 || d < (rel & -rel));
          prev_d = d;
        }
      }
      cr_assert_eq(tail, n, "n=%d root=%d: tree reaches %d ranks", n, root, tail);
      /* every non-root rank is among its parent's children */
      for (int r = 0; r < n; r++) {
        if (r == root) continue;
        int p = ul__tree_parent(r, root, n), kids[MAXN], found = 0;
        cr_assert(p >= 0 && p < n);
        int cnt = ul__tree_children(p, root, n, kids, MAXN);
        for (int i = 0; i < cnt; i++) found += kids[i] == r;
        cr_assert_eq(found, 1);
        /* parent clears the lowest set bit of rel */
        int rel = (r - root + n) % n;
        cr_assert_eq((p - root + n) % n, rel & (rel - 1));
      }
    }
  }
}

Test(patterns, tree_known_shapes_and_max, .timeout = 10) {
  int k[8];
  cr_assert_eq(ul__tree_children(0, 0, 8, k, 8), 3);
  cr_assert(k[0] == 1 && k[1] == 2 && k[2] == 4);
  cr_assert_eq(ul__tree_children(4, 0, 8, k, 8), 2);
  cr_assert(k[0] == 5 && k[1] == 6);
  cr_assert_eq(ul__tree_children(6, 0, 8, k, 8), 1);
  cr_assert_eq(k[0], 7);
  cr_assert_eq(ul__tree_children(7, 0, 8, k, 8), 0);
  cr_assert_eq(ul__tree_parent(7, 0, 8), 6);
  cr_assert_eq(ul__tree_parent(5, 0, 8), 4);
  cr_assert_eq(ul__tree_parent(3, 0, 8), 2);
  /* root 3 of 6: rel r -> rank (r+3)%6; children of root rel 1,2,4 -> ranks 4,5,1 */
  cr_assert_eq(ul__tree_children(3, 3, 6, k, 8), 3);
  cr_assert(k[0] == 4 && k[1] == 5 && k[2] == 1);
  cr_assert_eq(ul__tree_parent(1, 3, 6), 3);
  cr_assert_eq(ul__tree_parent(2, 3, 6), 1); /* rel 5 -> rel 4 */
  /* rel 2 of 3 has no children (2 + 1 = 3 = n) */
  cr_assert_eq(ul__tree_children(2, 0, 3, k, 8), 0);
  /* max limits what is written, not the count */
  int few[3] = {-7, -7, -7};
  cr_assert_eq(ul__tree_children(0, 0, 16, few, 2), 4);
  cr_assert(few[0] == 1 && few[1] == 2 && few[2] == -7);
  cr_assert_eq(ul__tree_children(0, 0, 16, NULL, 0), 4);
  /* single rank */
  cr_assert_eq(ul__tree_parent(0, 0, 1), -1);
  cr_assert_eq(ul__tree_children(0, 0, 1, k, 8), 0);
  /* invalid arguments */
  cr_assert_eq(ul__tree_parent(5, 0, 4), -1);
  cr_assert_eq(ul__tree_parent(0, 4, 4), -1);
  cr_assert_eq(ul__tree_parent(0, 0, 0), -1);
  cr_assert_eq(ul__tree_children(-1, 0, 4, k, 8), 0);
}

Test(patterns, ring_neighbours, .timeout = 10) {
  for (int n = 1; n <= MAXN; n++)
    for (int r = 0; r < n; r++) {
      cr_assert_eq(ul__ring_next(r, n), (r + 1) % n);
      cr_assert_eq(ul__ring_prev(r, n), (r - 1 + n) % n);
      cr_assert_eq(ul__ring_prev(ul__ring_next(r, n), n), r);
    }
  cr_assert_eq(ul__ring_next(0, 0), -1);
  cr_assert_eq(ul__ring_next(3, 3), -1);
  cr_assert_eq(ul__ring_prev(-1, 3), -1);
}

/* Simulate the ring reduce-scatter: contributions per (rank, block) as bit sets. All
 * ranks send at once each step; the receiver reduces into its own copy. */
Test(patterns, ring_reduce_scatter_schedule, .timeout = 30) {
  static uint64_t have[MAXN][MAXN];
  for (int n = 1; n <= MAXN; n++) {
    for (int r = 0; r < n; r++)
      for (int b = 0; b < n; b++) have[r][b] = 1ULL << r;
    for (int s = 0; s < n - 1; s++) {
      uint64_t sent[MAXN];
      int blk[MAXN];
      for (int r = 0; r < n; r++) {
        blk[r] = ul__ring_rs_send_block(r, s, n);
        cr_assert_eq(blk[r], (r - s + n) % n);
        sent[r] = have[r][blk[r]];
      }
      for (int r = 0; r < n; r++) {
        int from = ul__ring_prev(r, n);
        /* what rank r expects to receive at step s */
        cr_assert_eq(blk[from], (r - s - 1 + 2 * n) % n);
        cr_assert_eq(have[r][blk[from]] & sent[from], 0, "n=%d: contribution counted twice", n);
        have[r][blk[from]] |= sent[from];
      }
    }
    uint64_t all = n == 64 ? UINT64_MAX : (1ULL << n) - 1;
    for (int r = 0; r < n; r++)
      cr_assert_eq(have[r][(r + 1) % n], all, "n=%d: rank %d does not own block %d", n, r,
                   (r + 1) % n);
  }
}

/* Simulate the ring allgather starting from the reduce-scatter's result. */
Test(patterns, ring_allgather_schedule, .timeout = 30) {
  static int owns[MAXN][MAXN];
  for (int n = 1; n <= MAXN; n++) {
    memset(owns, 0, sizeof owns);
    for (int r = 0; r < n; r++) owns[r][(r + 1) % n] = 1;
    for (int s = 0; s < n - 1; s++) {
      int blk[MAXN];
      for (int r = 0; r < n; r++) {
        blk[r] = ul__ring_ag_send_block(r, s, n);
        cr_assert_eq(blk[r], (r + 1 - s + n) % n);
        cr_assert(owns[r][blk[r]], "n=%d step %d: rank %d sends block %d it lacks", n, s, r,
                  blk[r]);
      }
      for (int r = 0; r < n; r++) {
        int b = blk[ul__ring_prev(r, n)];
        cr_assert_eq(b, (r - s + n) % n);
        cr_assert(!owns[r][b], "n=%d: rank %d receives block %d twice", n, r, b);
        owns[r][b] = 1;
      }
    }
    for (int r = 0; r < n; r++)
      for (int b = 0; b < n; b++) cr_assert(owns[r][b], "n=%d: rank %d lacks block %d", n, r, b);
  }
}

Test(patterns, ring_blocks_safe_modulo, .timeout = 10) {
  for (int n = 1; n <= 17; n++)
    for (int r = 0; r < n; r++)
      for (int s = -3 * n; s <= 3 * n; s++) {
        int m = ((r - s) % n + n) % n;
        cr_assert_eq(ul__ring_rs_send_block(r, s, n), m);
        cr_assert_eq(ul__ring_ag_send_block(r, s, n), (m + 1) % n);
      }
  cr_assert_eq(ul__ring_rs_send_block(0, INT32_MIN, 3), (int)((0 - (long long)INT32_MIN) % 3));
  cr_assert_eq(ul__ring_rs_send_block(2, INT32_MAX, 5),
               (int)(((2 - (long long)INT32_MAX) % 5 + 5) % 5));
  cr_assert_eq(ul__ring_rs_send_block(0, 0, 0), -1);
  cr_assert_eq(ul__ring_ag_send_block(4, 0, 4), -1);
}

Test(patterns, recursive_doubling, .timeout = 10) {
  cr_assert_eq(ul__pow2_floor(1), 1);
  cr_assert_eq(ul__pow2_floor(2), 2);
  cr_assert_eq(ul__pow2_floor(3), 2);
  cr_assert_eq(ul__pow2_floor(63), 32);
  cr_assert_eq(ul__pow2_floor(64), 64);
  cr_assert_eq(ul__pow2_floor(65), 64);
  cr_assert_eq(ul__pow2_floor(INT32_MAX), 1 << 30);
  cr_assert_eq(ul__pow2_floor(0), 0);
  for (int n = 1; n <= MAXN; n++) {
    int p = ul__pow2_floor(n);
    cr_assert(p <= n && 2 * p > n && (p & (p - 1)) == 0);
    int levels = 0;
    while ((1 << levels) < p) levels++;
    uint64_t have[MAXN];
    for (int r = 0; r < n; r++) have[r] = 1ULL << r;
    for (int step = -1; step <= levels + 1; step++) {
      uint64_t next[MAXN];
      memcpy(next, have, sizeof next);
      for (int r = 0; r < n; r++) {
        int q = ul__rd_partner(r, step, n);
        if (r >= p || step < 0 || step >= levels) {
          cr_assert_eq(q, -1, "n=%d r=%d step=%d", n, r, step);
          continue;
        }
        cr_assert_eq(q, r ^ (1 << step));
        cr_assert(q >= 0 && q < p && q != r);
        cr_assert_eq(ul__rd_partner(q, step, n), r, "not an involution");
        next[r] |= have[q];
      }
      memcpy(have, next, sizeof next);
    }
    /* after all steps every rank below p has every contribution below p */
    uint64_t all = p == 64 ? UINT64_MAX : (1ULL << p) - 1;
    for (int r = 0; r < p; r++) cr_assert_eq(have[r], all, "n=%d rank %d incomplete", n, r);
  }
  cr_assert_eq(ul__rd_partner(0, 0, 0), -1);
  cr_assert_eq(ul__rd_partner(-1, 0, 4), -1);
}

Test(patterns, block_range_partitions, .timeout = 10) {
  const size_t counts[] = {0, 1, 2, 3, 5, 7, 63, 64, 65, 100, 1000, 1001, 123457};
  for (unsigned c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t count = counts[c];
    for (int nb = 1; nb <= MAXN; nb++) {
      size_t expect_off = 0, q = count / (size_t)nb, rem = count % (size_t)nb;
      for (int b = 0; b < nb; b++) {
        size_t off = 7, len = 7;
        ul__block_range(count, nb, b, &off, &len);
        cr_assert_eq(off, expect_off, "count %zu nb %d b %d: gap or overlap", count, nb, b);
        cr_assert_eq(len, q + ((size_t)b < rem ? 1 : 0));
        cr_assert_eq(off, (size_t)b * q + ((size_t)b < rem ? (size_t)b : rem));
        expect_off += len;
      }
      cr_assert_eq(expect_off, count, "count %zu nb %d: blocks cover %zu", count, nb,
                   expect_off);
    }
  }
  size_t off = 9, len = 9;
  ul__block_range(5, 8, 6, &off, &len); /* count < nb: trailing blocks are empty */
  cr_assert(off == 5 && len == 0);
  ul__block_range(5, 8, 2, &off, &len);
  cr_assert(off == 2 && len == 1);
  ul__block_range(10, 0, 0, &off, &len);
  cr_assert(off == 0 && len == 0);
  off = len = 9;
  ul__block_range(10, 3, 3, &off, &len);
  cr_assert(off == 0 && len == 0);
  ul__block_range(10, 3, 1, NULL, &len);
  cr_assert_eq(len, 3);
}
