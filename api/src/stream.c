/* Host streams: an in-order queue of tasks run by one worker thread, for backends
 * without device queues (host, mpi, sim). The first error sticks to the stream and is
 * returned by synchronize/query; later tasks still run (they report their own errors
 * on the communicator). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ul_core.h"

typedef struct task {
  struct task *next;
  ul__task_fn fn;
  size_t size;
  _Alignas(16) unsigned char arg[];
} task_t;

struct ul__host_stream {
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  task_t *head, *tail;
  uint64_t enqueued, completed;
  ul_result_t first_error;
  int stop;
  pthread_t thread;
};

static void *worker(void *p) {
  ul__host_stream_t *s = p;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv_work, &s->mu);
    if (!s->head && s->stop) break;
    task_t *t = s->head;
    pthread_mutex_unlock(&s->mu);
    ul_result_t rc = t->fn(t->arg);
    pthread_mutex_lock(&s->mu);
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    if (rc != UL_OK && s->first_error == UL_OK) s->first_error = rc;
    s->completed++;
    free(t);
    pthread_cond_broadcast(&s->cv_done);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

ul_result_t ul__host_stream_create(ul_comm_t comm, ul__host_stream_t **out) {
  ul__host_stream_t *s = calloc(1, sizeof *s);
  if (!s) return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_stream_create: out of memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv_work, NULL);
  pthread_cond_init(&s->cv_done, &ca);
  pthread_condattr_destroy(&ca);
  int e = pthread_create(&s->thread, NULL, worker, s);
  if (e != 0) {
    free(s);
    return ul__comm_set_error(comm, UL_ERR_SYSTEM, "ul_stream_create: pthread_create: %s",
                              strerror(e));
  }
  *out = s;
  return UL_OK;
}

ul_result_t ul__host_stream_enqueue(ul__host_stream_t *s, ul__task_fn fn, void *arg,
                                    size_t arg_size) {
  task_t *t = malloc(sizeof *t + arg_size);
  if (!t) return UL_ERR_NO_MEMORY;
  t->next = NULL;
  t->fn = fn;
  t->size = arg_size;
  memcpy(t->arg, arg, arg_size);
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = t;
  else s->head = t;
  s->tail = t;
  s->enqueued++;
  pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  return UL_OK;
}

ul_result_t ul__host_stream_sync(ul__host_stream_t *s, int timeout_ms) {
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  /* The tasks themselves time out on their own waits; this bound only guards against a
   * task that never returns. Give it a margin over the communicator timeout. */
  long long ms = timeout_ms > 0 ? (long long)timeout_ms * 2 + 1000 : 0;
  dl.tv_sec += ms / 1000;
  dl.tv_nsec += (ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->enqueued;
  while (s->completed < target) {
    if (ms > 0) {
      if (pthread_cond_timedwait(&s->cv_done, &s->mu, &dl) == ETIMEDOUT) {
        pthread_mutex_unlock(&s->mu);
        return UL_ERR_TIMEOUT;
      }
    } else {
      pthread_cond_wait(&s->cv_done, &s->mu);
    }
  }
  ul_result_t rc = s->first_error;
  s->first_error = UL_OK;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

ul_result_t ul__host_stream_query(ul__host_stream_t *s) {
  pthread_mutex_lock(&s->mu);
  ul_result_t rc = s->completed < s->enqueued ? UL_IN_PROGRESS : s->first_error;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void ul__host_stream_destroy(ul__host_stream_t *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->cv_work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv_work);
  pthread_cond_destroy(&s->cv_done);
  free(s);
}
