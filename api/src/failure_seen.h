/* Has this process seen a communication failure (failure_seen.c)? */
#ifndef UL_FAILURE_SEEN_H
#define UL_FAILURE_SEEN_H
#include <unilink/unilink.h>

/* Note rc if it says a peer may be gone or stuck: UL_ERR_TIMEOUT, UL_ERR_PEER_LOST,
 * UL_ERR_ABORTED, UL_ERR_REVOKED. Other codes are ignored. Any thread. */
void ul__failure_note(ul_result_t rc);

#endif
