/* Public stream handles: create, wrap a native queue, synchronize, query, destroy, and
 * the release of every stream of a communicator at teardown. The queues themselves are
 * the host worker (stream.c) or the backend's stream. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "ul_core.h"

/* A stream the user destroyed while work was still queued on it: the handle is no longer
 * valid for the user, the worker finishes the queue in the background (as
 * cudaStreamDestroy lets a device finish), and the communicator frees it once the queue
 * has drained (next stream create/destroy) or at its own teardown. */
#define UL__STREAM_DETACHED 0x756c6474U

static void stream_link(ul_comm_t comm, ul_stream_t s) {
  pthread_mutex_lock((pthread_mutex_t *)comm->lock);
  s->next = comm->streams;
  comm->streams = s;
  pthread_mutex_unlock((pthread_mutex_t *)comm->lock);
}

static void stream_unlink(ul_comm_t comm, ul_stream_t s) {
  pthread_mutex_lock((pthread_mutex_t *)comm->lock);
  for (ul_stream_t *pp = &comm->streams; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  pthread_mutex_unlock((pthread_mutex_t *)comm->lock);
}

/* Free a stream's queue: host worker (after its work, bounded by the timeout) or the
 * backend's stream. */
static ul_result_t stream_release(ul_stream_t stream) {
  ul_result_t rc = UL_OK;
  if (stream->host) {
    rc = ul__host_stream_sync(stream->host, stream->comm->config.timeout_ms);
    ul__host_stream_destroy(stream->host);
    stream->host = NULL;
  } else if (stream->bstream) {
    rc = stream->comm->backend->ops.stream_destroy(stream->bstream);
    stream->bstream = NULL;
  }
  return rc;
}

/* Teardown of the communicator (destroy, abort): every queue is released. A stream the
 * user still holds becomes an orphan (its ul_stream_destroy frees it); one the user has
 * destroyed already is freed here. The compare-and-swap decides which side frees. */
void ul__streams_release_all(ul_comm_t comm) {
  ul_stream_t s = comm->streams;
  comm->streams = NULL;
  while (s) {
    ul_stream_t next = s->next;
    stream_release(s);
    __atomic_store_n(&s->comm, NULL, __ATOMIC_RELEASE);
    uint32_t live = UL__STREAM_MAGIC;
    if (!__atomic_compare_exchange_n(&s->magic, &live, UL__STREAM_ORPHAN, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      free(s); /* detached: the user's handle is gone */
    s = next;
  }
}

/* Free the detached streams whose queue has drained (their worker is idle: joining it is
 * immediate). Called with the communicator usable. */
static void streams_reap(ul_comm_t comm) {
  ul_stream_t done = NULL;
  pthread_mutex_lock((pthread_mutex_t *)comm->lock);
  for (ul_stream_t *pp = &comm->streams; *pp;) {
    ul_stream_t s = *pp;
    if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == UL__STREAM_DETACHED && s->host &&
        ul__host_stream_query(s->host) != UL_IN_PROGRESS) {
      *pp = s->next;
      s->next = done;
      done = s;
    } else {
      pp = &s->next;
    }
  }
  pthread_mutex_unlock((pthread_mutex_t *)comm->lock);
  while (done) {
    ul_stream_t next = done->next;
    ul__host_stream_destroy(done->host);
    free(done);
    done = next;
  }
}

UL_API ul_result_t ul_stream_create(ul_comm_t comm, ul_stream_t *stream) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_stream_create");
  if (stream == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_stream_create: stream is NULL");
  *stream = NULL;
  streams_reap(comm);
  ul_stream_t s = calloc(1, sizeof *s);
  if (!s) return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_stream_create: out of memory");
  s->magic = UL__STREAM_MAGIC;
  s->comm = comm;
  ul_result_t rc;
  if (comm->backend->caps.flags & UL_BACKEND_HOST_STREAMS)
    rc = ul__host_stream_create(comm, &s->host);
  else
    rc = comm->backend->ops.stream_create(comm->bcomm, &s->bstream);
  if (rc != UL_OK) {
    free(s);
    if (rc == UL_ERR_UNSUPPORTED && comm->last_error[0] == '\0')
      ul__comm_set_error(comm, rc, "ul_stream_create: backend %s has no streams",
                         comm->backend->ops.name);
    return rc;
  }
  stream_link(comm, s);
  *stream = s;
  return UL_OK;
}

UL_API ul_result_t ul_stream_wrap_native(ul_comm_t comm, void *native, ul_stream_t *stream) {
  if (!ul__comm_valid(comm))
    return ul__comm_invalid(comm, "ul_stream_wrap_native");
  if (stream == NULL || native == NULL)
    return ul__comm_set_error(comm, UL_ERR_INVALID_ARG, "ul_stream_wrap_native: %s is NULL",
                              stream ? "native" : "stream");
  *stream = NULL;
  ul_stream_t s = calloc(1, sizeof *s);
  if (!s) return ul__comm_set_error(comm, UL_ERR_NO_MEMORY, "ul_stream_wrap_native: out of memory");
  s->magic = UL__STREAM_MAGIC;
  s->comm = comm;
  ul_result_t rc = comm->backend->ops.stream_wrap(comm->bcomm, native, &s->bstream);
  if (rc != UL_OK) {
    free(s);
    if (rc == UL_ERR_UNSUPPORTED)
      ul__comm_set_error(comm, rc, "ul_stream_wrap_native: backend %s has no native streams",
                         comm->backend->ops.name);
    return rc;
  }
  stream_link(comm, s);
  *stream = s;
  return UL_OK;
}

/* atomic: an abort on another thread orphans the stream (magic) while this reads it */
static int stream_valid(ul_stream_t s) {
  return s && __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == UL__STREAM_MAGIC;
}

UL_API ul_result_t ul_stream_synchronize(ul_stream_t stream) {
  if (!stream_valid(stream))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_stream_synchronize: stream is NULL or invalid");
  ul_comm_t c = __atomic_load_n(&stream->comm, __ATOMIC_ACQUIRE);
  /* In flight, so an abort racing this wait does not destroy the worker or the backend
   * communicator under it; once an abort has begun the wait is refused. */
  if (!ul__comm_enter(c))
    return ul__set_thread_error(UL_ERR_ABORTED,
                                "ul_stream_synchronize: the stream's communicator was aborted");
  if (stream->host) {
    ul_result_t rc = ul__host_stream_sync(stream->host, c->config.timeout_ms);
    __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
    if (rc == UL_ERR_TIMEOUT)
      ul__comm_set_error(c, rc, "ul_stream_synchronize: work still running after %d ms",
                         c->config.timeout_ms);
    return rc;
  }
  /* A timeout or a backend's asynchronous error found here fails the communicator like
   * one found inside a collective. */
  ul_result_t rc = c->backend->ops.stream_synchronize(stream->bstream, c->config.timeout_ms);
  if (ul__fatal_error(rc)) c->sticky = rc;
  __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  return rc;
}

UL_API ul_result_t ul_stream_query(ul_stream_t stream) {
  if (!stream_valid(stream))
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_stream_query: stream is NULL or invalid");
  if (stream->host) return ul__host_stream_query(stream->host);
  ul_comm_t c = stream->comm;
  __atomic_add_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  ul_result_t rc = c->backend->ops.stream_query(stream->bstream);
  if (ul__fatal_error(rc)) c->sticky = rc;
  __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  return rc;
}

/* Prompt in every state (issue 16): an idle queue is released at once; a busy one is
 * detached (see UL__STREAM_DETACHED) instead of waited for, so a task blocked on a peer
 * that never comes no longer holds the caller for the communicator's timeout. */
UL_API ul_result_t ul_stream_destroy(ul_stream_t stream) {
  if (stream == NULL) return UL_OK;
  uint32_t m = __atomic_load_n(&stream->magic, __ATOMIC_ACQUIRE);
  if (m == UL__STREAM_ORPHAN) { /* its communicator already released it */
    stream->magic = 0;
    free(stream);
    return UL_OK;
  }
  if (m != UL__STREAM_MAGIC)
    return ul__set_thread_error(UL_ERR_INVALID_ARG, "ul_stream_destroy: invalid stream handle");
  ul_comm_t c = __atomic_load_n(&stream->comm, __ATOMIC_ACQUIRE);
  if (!ul__comm_enter(c)) {
    /* The communicator's teardown (an abort on another thread) is releasing this queue:
     * hand the handle over; whichever side comes second frees it. */
    uint32_t live = UL__STREAM_MAGIC;
    if (!__atomic_compare_exchange_n(&stream->magic, &live, UL__STREAM_DETACHED, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
        live == UL__STREAM_ORPHAN) {
      stream->magic = 0;
      free(stream);
    }
    return UL_OK;
  }
  ul_result_t rc = UL_OK;
  /* Native streams keep their vendor's rule (cudaStreamDestroy returns at once). */
  if (!stream->host || ul__host_stream_query(stream->host) != UL_IN_PROGRESS) {
    stream_unlink(c, stream);
    __atomic_store_n(&stream->magic, 0, __ATOMIC_RELEASE);
    rc = stream_release(stream); /* idle: the unreported first error of its work */
    free(stream);
  } else {
    __atomic_store_n(&stream->magic, UL__STREAM_DETACHED, __ATOMIC_RELEASE);
  }
  streams_reap(c);
  __atomic_sub_fetch(&c->in_flight, 1, __ATOMIC_SEQ_CST);
  return rc;
}
