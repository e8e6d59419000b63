/* Pure rank arithmetic of the generic algorithms: ring neighbours and block schedules,
 * binomial trees, recursive-doubling partners, balanced block splits. No state, no I/O.
 * Invalid arguments (nranks < 1, rank out of range) give -1 (or 0 children) instead of
 * dividing by zero, so callers can assert on them. */
#include "../ul_core.h"

/* x mod n in [0, n) for any x (C's % keeps the sign of x). */
static int pattern_mod(long long x, int n) {
  long long r = x % n;
  return (int)(r < 0 ? r + n : r);
}

static bool pattern_rank_ok(int rank, int nranks) {
  return nranks >= 1 && rank >= 0 && rank < nranks;
}

int ul__ring_next(int rank, int nranks) {
  if (!pattern_rank_ok(rank, nranks)) return -1;
  return pattern_mod((long long)rank + 1, nranks);
}

int ul__ring_prev(int rank, int nranks) {
  if (!pattern_rank_ok(rank, nranks)) return -1;
  return pattern_mod((long long)rank - 1, nranks);
}

/* Reduce-scatter step s: send block (rank - s) mod n, receive block (rank - s - 1) mod n
 * from prev and reduce it into the local copy; after n-1 steps rank owns the fully
 * reduced block (rank + 1) mod n. */
int ul__ring_rs_send_block(int rank, int step, int nranks) {
  if (!pattern_rank_ok(rank, nranks)) return -1;
  return pattern_mod((long long)rank - step, nranks);
}

/* Allgather step s: send block (rank + 1 - s) mod n (starting with the block the
 * reduce-scatter left here), receive block (rank - s) mod n. */
int ul__ring_ag_send_block(int rank, int step, int nranks) {
  if (!pattern_rank_ok(rank, nranks)) return -1;
  return pattern_mod((long long)rank + 1 - step, nranks);
}

/* Binomial tree over rel = (rank - root) mod n: the parent of rel clears its lowest set
 * bit; the children of rel add each power of two below that bit (all powers below n for
 * the root). */
int ul__tree_parent(int rank, int root, int nranks) {
  if (!pattern_rank_ok(rank, nranks) || !pattern_rank_ok(root, nranks)) return -1;
  unsigned rel = (unsigned)pattern_mod((long long)rank - root, nranks);
  if (rel == 0) return -1;
  unsigned parent_rel = rel & (rel - 1u);
  return pattern_mod((long long)parent_rel + root, nranks);
}

/* Children in ascending distance order (rel + 1, rel + 2, rel + 4, ...). Returns how many
 * children there are; writes the first min(count, max) of them. */
int ul__tree_children(int rank, int root, int nranks, int *children, int max) {
  if (!pattern_rank_ok(rank, nranks) || !pattern_rank_ok(root, nranks)) return 0;
  unsigned rel = (unsigned)pattern_mod((long long)rank - root, nranks);
  /* Distances strictly below limit are children (bounded by n for the root). */
  unsigned long long limit = rel == 0 ? (unsigned long long)nranks : (rel & (0u - rel));
  int count = 0;
  for (unsigned long long d = 1; d < limit; d <<= 1) {
    unsigned long long child = rel + d;
    if (child >= (unsigned long long)nranks) break; /* larger d only go further out */
    if (children && count < max) children[count] = pattern_mod((long long)child + root, nranks);
    count++;
  }
  return count;
}

int ul__pow2_floor(int n) {
  if (n < 1) return 0;
  unsigned p = 1;
  while (p <= (unsigned)n / 2u) p <<= 1;
  return (int)p;
}

/* Recursive doubling among the first pow2_floor(n) ranks: partner at step k is
 * rank ^ 2^k; ranks beyond that power of two and steps past log2 have none. */
int ul__rd_partner(int rank, int step, int nranks) {
  if (!pattern_rank_ok(rank, nranks)) return -1;
  int p = ul__pow2_floor(nranks);
  int levels = 0;
  while ((1 << levels) < p) levels++;
  if (rank >= p || step < 0 || step >= levels) return -1;
  return rank ^ (1 << step);
}

/* Block b of nblocks: the first count % nblocks blocks get one extra element. Invalid
 * nblocks or b give an empty block at offset 0. */
void ul__block_range(size_t count, int nblocks, int b, size_t *off, size_t *len) {
  size_t o = 0, l = 0;
  if (nblocks >= 1 && b >= 0 && b < nblocks) {
    size_t nb = (size_t)nblocks, bb = (size_t)b;
    size_t q = count / nb, rem = count % nb;
    l = q + (bb < rem ? 1u : 0u);
    o = bb * q + (bb < rem ? bb : rem);
  }
  if (off) *off = o;
  if (len) *len = l;
}
