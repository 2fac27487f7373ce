/* lifelines.c — a TCP connection between every two ranks, whose close says the other
 * process ended (lifelines.h).
 *
 * Opening is four MPI_Allgathers: each rank's host name and a random word; the port it
 * listens on and its addresses; which ranks below it it reached (a rank above connects to
 * one below and says its rank and word, so a stranger's connection is refused); which ranks
 * above it it accepted. A pair has its lifeline where both ends say so, so that no end
 * waits on a connection the other dropped. Nothing is written on a lifeline but one
 * goodbye byte at its close: a read of anything else, of the end of the stream, or of an
 * error is the other process's end, in order once its goodbye was read. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lifelines.h"
#include "tr_base.h"

enum { ADDRS = 4, CONNECT_MS = 2000, ACCEPT_MS = 5000 };
enum { LIVE, BYE, ENDED, DIED }; /* a rank's state: its goodbye read; closed after it; without */
static const char GOODBYE = 'B';

struct tr__lifelines {
  int rank, size;
  int *fd;              /* [rank]: -1, none (itself, closed, never made) */
  unsigned char *state; /* [rank] */
  struct pollfd *polls; /* scratch for watch */
};

typedef struct who { /* the first round */
  char host[64];
  uint64_t word;
} who;

typedef struct where { /* the second */
  int32_t ok, port;
  uint32_t addr[ADDRS]; /* IPv4, network order; none when every rank shares a host */
  int32_t naddr;
} where;

typedef struct hello { /* what a connecting rank says first */
  int32_t rank;
  uint64_t word;
} __attribute__((packed)) hello;

static uint64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int allgather(MPI_Comm comm, const void *mine, size_t n, void *all) {
  return MPI_Allgather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, comm) == MPI_SUCCESS ? 0 : -1;
}

/* This host's IPv4 addresses other than loopback, at most ADDRS. */
static int addresses(uint32_t *out) {
  struct ifaddrs *ifs = NULL;
  int n = 0;
  if (getifaddrs(&ifs)) return 0;
  for (struct ifaddrs *i = ifs; i && n < ADDRS; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    const uint32_t a = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
    if ((ntohl(a) >> 24) != 127) out[n++] = a;
  }
  freeifaddrs(ifs);
  return n;
}

/* A connection to addr:port within CONNECT_MS, or -1. */
static int connect_to(uint32_t addr, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = addr};
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  int err = 0;
  socklen_t len = sizeof err;
  if (errno == EINPROGRESS && poll(&p, 1, CONNECT_MS) == 1 &&
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
    return fd;
  close(fd);
  return -1;
}

/* All of n bytes to or from fd (non-blocking) before `until`, or -1. */
static int whole(int fd, void *buf, size_t n, bool out, uint64_t until) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = out ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                          : recv(fd, (char *)buf + done, n - done, 0);
    if (k > 0) {
      done += (size_t)k;
      continue;
    }
    if (k == 0 || (errno != EAGAIN && errno != EINTR)) return -1;
    const uint64_t now = ms_now();
    if (now >= until) return -1;
    struct pollfd p = {.fd = fd, .events = out ? POLLOUT : POLLIN};
    poll(&p, 1, (int)(until - now));
  }
  return 0;
}

/* Rank r's lifeline, from this rank (above it): its listener, loopback on the same host. */
static int reach(const who *me, const who *them, const where *at, uint64_t word, int rank) {
  const bool same = !strcmp(me->host, them->host);
  const uint32_t loop = htonl(INADDR_LOOPBACK);
  for (int i = same ? -1 : 0; i < (same ? 0 : at->naddr); i++) {
    const int fd = connect_to(i < 0 ? loop : at->addr[i], at->port);
    if (fd < 0) continue;
    hello h = {.rank = rank, .word = word};
    if (whole(fd, &h, sizeof h, true, ms_now() + CONNECT_MS) == 0) return fd;
    close(fd);
  }
  return -1;
}

/* The ranks above this one that said they reached it, accepted within ACCEPT_MS; a
 * connection that does not say a rank and its word is closed. */
static void accept_all(tr__lifelines *l, int listener, const who *all, const unsigned char *reached) {
  int expected = 0;
  for (int r = l->rank + 1; r < l->size; r++) expected += reached[(size_t)r * l->size + l->rank];
  const uint64_t until = ms_now() + ACCEPT_MS;
  while (expected > 0 && ms_now() < until) {
    struct pollfd p = {.fd = listener, .events = POLLIN};
    if (poll(&p, 1, (int)(until - ms_now())) != 1) continue;
    const int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    hello h;
    if (whole(fd, &h, sizeof h, false, until) || h.rank <= l->rank || h.rank >= l->size ||
        h.word != all[h.rank].word || l->fd[h.rank] >= 0 ||
        !reached[(size_t)h.rank * l->size + l->rank]) {
      close(fd);
      continue;
    }
    l->fd[h.rank] = fd;
    expected--;
  }
}

/* A listening socket: loopback only when every rank is on this host. Its port, or -1. */
static int listen_on(bool local, int size, int *port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(local ? INADDR_LOOPBACK : INADDR_ANY)};
  socklen_t len = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, size + 16) ||
      getsockname(fd, (struct sockaddr *)&sa, &len)) {
    close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

static void *zeroed(size_t n, size_t size) {
  void *p = calloc(n, size);
  TR_ASSERT(p != NULL); /* a few bytes a rank: every rank must go on to the next round */
  return p;
}

static void lifelines_free(tr__lifelines *l) {
  for (int r = 0; r < l->size; r++)
    if (l->fd[r] >= 0) close(l->fd[r]);
  free(l->fd);
  free(l->state);
  free(l->polls);
  free(l);
}

/* Why rank r has no lifeline, for the line that says so. */
static const char *why_none(bool failed, const where *here, const where *there) {
  return failed ? "MPI failed while the ranks made them"
         : !here->ok || !there->ok ? "a listening TCP socket could not be made"
                                   : "no TCP connection between them could be made";
}

tr__lifelines *tr__lifelines_open(MPI_Comm comm, int rank, int size) {
  if (size < 2) return NULL;
  tr__lifelines *l = zeroed(1, sizeof *l);
  l->rank = rank;
  l->size = size;
  l->fd = zeroed((size_t)size, sizeof *l->fd);
  l->state = zeroed((size_t)size, 1);
  l->polls = zeroed((size_t)size, sizeof *l->polls);
  for (int r = 0; r < size; r++) l->fd[r] = -1;
  who me = {0}, *all = zeroed((size_t)size, sizeof *all);
  where here = {0}, *at = zeroed((size_t)size, sizeof *at);
  unsigned char *row = zeroed((size_t)size, 1), *rows = zeroed((size_t)size * size, 1);
  /* every rank takes part in every round, whatever failed here: the others wait for it */
  gethostname(me.host, sizeof me.host - 1);
  if (getrandom(&me.word, sizeof me.word, 0) != sizeof me.word) me.word = (uint64_t)ms_now();
  int failed = allgather(comm, &me, sizeof me, all);
  bool local = true;
  for (int r = 0; r < size; r++) local &= !strcmp(all[r].host, me.host);
  const int listener = failed ? -1 : listen_on(local, size, &here.port);
  here.ok = listener >= 0;
  if (here.ok && !local) here.naddr = addresses(here.addr);
  failed |= allgather(comm, &here, sizeof here, at);
  for (int r = 0; here.ok && !failed && r < rank; r++)
    if (at[r].ok && (l->fd[r] = reach(&me, &all[r], &at[r], me.word, rank)) >= 0) row[r] = 1;
  failed |= allgather(comm, row, (size_t)size, rows);
  if (here.ok && !failed) accept_all(l, listener, all, rows);
  if (listener >= 0) close(listener);
  for (int r = rank + 1; r < size; r++) row[r] = l->fd[r] >= 0;
  failed |= allgather(comm, row, (size_t)size, rows);
  /* a pair's lifeline stands where both ends hold it */
  int missing = 0;
  for (int r = 0; r < size; r++) {
    if (r == rank) continue;
    if ((failed || !rows[(size_t)rank * size + r] || !rows[(size_t)r * size + rank]) &&
        l->fd[r] >= 0)
      close(l->fd[r]), l->fd[r] = -1;
    if (l->fd[r] >= 0) continue;
    l->state[r] = ENDED; /* nothing to watch */
    if (missing++ < 4)
      fprintf(stderr, "troupe: rank %d: no lifeline to rank %d%s%s (%s): were it to die, its "
              "silence alone would say so (--watchdog)\n", rank, r, local ? "" : " on ",
              local ? "" : all[r].host, why_none(failed, &here, &at[r]));
  }
  free(all);
  free(at);
  free(row);
  free(rows);
  if (missing < size - 1) return l;
  lifelines_free(l);
  return NULL;
}

bool tr__lifelines_watch(tr__lifelines *l) {
  if (l == NULL) return false;
  int n = 0;
  for (int r = 0; r < l->size; r++)
    if (l->fd[r] >= 0) l->polls[n++] = (struct pollfd){.fd = l->fd[r], .events = POLLIN};
  if (n == 0 || poll(l->polls, (nfds_t)n, 0) <= 0) return false;
  bool ended = false;
  for (int r = 0, i = 0; r < l->size; r++) {
    if (l->fd[r] < 0) continue;
    if (!l->polls[i++].revents) continue;
    char buf[16];
    const ssize_t k = recv(l->fd[r], buf, sizeof buf, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (k > 0 && l->state[r] == LIVE && buf[0] == GOODBYE && k == 1) {
      l->state[r] = BYE; /* its close follows */
      continue;
    }
    if (k > 0 && l->state[r] == BYE) continue; /* nothing more is ever sent */
    /* the end of the stream, an error (reset), or what no rank sends: it ended */
    l->state[r] = l->state[r] == BYE ? ENDED : DIED;
    close(l->fd[r]);
    l->fd[r] = -1;
    ended = true;
  }
  return ended;
}

bool tr__lifelines_died(const tr__lifelines *l, int r) {
  return l && r >= 0 && r < l->size && l->state[r] == DIED;
}

void tr__lifelines_close(tr__lifelines *l) {
  if (l == NULL) return;
  for (int r = 0; r < l->size; r++) {
    if (l->fd[r] < 0) continue;
    (void)!send(l->fd[r], &GOODBYE, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(l->fd[r], SHUT_WR); /* the goodbye, then the end of the stream */
    close(l->fd[r]);
    l->fd[r] = -1;
  }
  lifelines_free(l);
}
