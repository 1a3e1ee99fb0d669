/* The programs the node tests run in their pods, one static binary with a mode per image
 * use (tests/node/images.py builds it with `gcc -static` and packs it into the images):
 *
 *   workload pause                      sleep until SIGTERM/SIGINT (the sandbox image's)
 *   workload ramp USAGE START CROSSING RATE RESULT GO
 *       populate START bytes of anonymous memory at once, then wait until the file GO
 *       exists and allocate and touch memory at RATE bytes/s, in steps of at most 1 MiB on
 *       a schedule checked every 0.5 ms, reading the byte count in the file USAGE (the
 *       kubepods cgroup's usage) after every step; the first time it reaches CROSSING, write
 *       {"crossed_at": CLOCK_MONOTONIC seconds, "usage": bytes, "rate": achieved} to RESULT.
 *       Runs until killed; a SIGTERM's arrival is written to RESULT.stop (seconds).
 *       A USAGE named memory.stat measures what the kernel cannot reclaim instead: the
 *       memory.usage_in_bytes beside it less total_inactive_file and the clean
 *       total_active_file (less total_dirty and total_writeback), as the agent's
 *       activePageCache: reclaimable counts it.
 *   workload hold BYTES                 populate BYTES of anonymous memory, then sleep
 *   workload fill PATH MIB RATE_MIB     write MIB MiB of zeros to PATH at RATE_MIB MiB/s
 *                                       (0: as fast as it can), fsync, then sleep
 *   workload cache PATH MIB             write a MIB MiB file, then read all of it every
 *                                       second, keeping its pages in the active page cache
 *
 * PID 1 of a container ignores signals it has no handler for, so every mode exits on
 * SIGTERM: the kubelet's graceful stop takes effect at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static const size_t MIB = 1 << 20;

static int stop_fd = -1;
/* ramp: RESULT.stop, where the SIGTERM handler writes when it came (the instant the ramp
 * stopped allocating; the exit that follows frees the memory, which takes a while) */

static void stop(int sig) {
  (void)sig;
  if (stop_fd >= 0) {
    /* async-signal-safe: clock_gettime, write and digits by hand */
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    char text[48];
    int at = (int)sizeof text;
    text[--at] = '\n';
    long nanos = t.tv_nsec;
    for (int digit = 0; digit < 9; digit++, nanos /= 10) text[--at] = (char)('0' + nanos % 10);
    text[--at] = '.';
    long long seconds = (long long)t.tv_sec;
    do {
      text[--at] = (char)('0' + seconds % 10);
      seconds /= 10;
    } while (seconds > 0);
    ssize_t ignored = write(stop_fd, text + at, sizeof text - (size_t)at);
    (void)ignored;
  }
  _exit(0);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void nap(double seconds) {
  struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&t, NULL);
}

static long long read_usage(int fd) {
  char text[64];
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = 0;
  return atoll(text);
}

static long long stat_key(const char *stat, const char *key) {
  size_t length = strlen(key);
  for (const char *line = stat; line != NULL && *line; line = strchr(line, '\n')) {
    if (*line == '\n') line++;
    if (strncmp(line, key, length) == 0 && line[length] == ' ') return atoll(line + length + 1);
  }
  return 0;
}

/* usage less the page cache the kernel can drop: fd is the usage file, stat_fd memory.stat */
static long long read_unreclaimable(int fd, int stat_fd) {
  static char stat[16384];
  long long usage = read_usage(fd);
  ssize_t n = pread(stat_fd, stat, sizeof stat - 1, 0);
  if (usage < 0 || n <= 0) return -1;
  stat[n] = 0;
  long long active = stat_key(stat, "total_active_file") - stat_key(stat, "total_dirty") -
                     stat_key(stat, "total_writeback");
  return usage - stat_key(stat, "total_inactive_file") - (active > 0 ? active : 0);
}

static void sleep_forever(void) {
  for (;;) pause();
}

/* ``room`` bytes of address space, the first ``bytes`` of it touched (charged). */
static char *populate(size_t bytes, size_t room) {
  char *region = mmap(NULL, room, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) { perror("mmap"); exit(1); }
  for (size_t at = 0; at < bytes; at += 64 * MIB) {
    size_t step = bytes - at < 64 * MIB ? bytes - at : 64 * MIB;
    if (madvise(region + at, step, MADV_POPULATE_WRITE) != 0) { perror("madvise"); exit(1); }
  }
  return region;
}

static int ramp(char **argv) {
  int usage_fd = open(argv[0], O_RDONLY), stat_fd = -1;
  if (usage_fd < 0) { perror(argv[0]); return 1; }
  size_t named = strlen(argv[0]);
  if (named >= 11 && strcmp(argv[0] + named - 11, "memory.stat") == 0) {
    char usage_path[4096];
    snprintf(usage_path, sizeof usage_path, "%.*smemory.usage_in_bytes", (int)(named - 11),
             argv[0]);
    stat_fd = usage_fd;
    usage_fd = open(usage_path, O_RDONLY);
    if (usage_fd < 0) { perror(usage_path); return 1; }
  }
  size_t start = strtoull(argv[1], NULL, 10) / 4096 * 4096;
  long long crossing = atoll(argv[2]);
  double rate = strtod(argv[3], NULL);
  const char *result = argv[4], *go = argv[5];
  char stop_path[4096];
  snprintf(stop_path, sizeof stop_path, "%s.stop", result);
  stop_fd = open(stop_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  char *region = populate(start, (size_t)64 << 30);
  printf("ready %lld\n",
         stat_fd < 0 ? read_usage(usage_fd) : read_unreclaimable(usage_fd, stat_fd));
  fflush(stdout);
  while (access(go, F_OK) != 0) nap(0.001);
  double began = now();
  size_t offset = start;
  int crossed = 0;
  for (;;) {
    size_t target = start + (size_t)(rate * (now() - began)) / 4096 * 4096;
    if (target > offset) {
      /* at most a step between two readings: a ramp behind its schedule must not cross
       * inside one long call, unseen */
      if (target > offset + MIB) target = offset + MIB;
      madvise(region + offset, target - offset, MADV_POPULATE_WRITE);
      offset = target;
    } else {
      nap(0.0005);
    }
    if (!crossed) {
      long long used =
          stat_fd < 0 ? read_usage(usage_fd) : read_unreclaimable(usage_fd, stat_fd);
      if (used >= crossing) {
        double at = now();
        crossed = 1;
        FILE *out = fopen(result, "w");
        if (out != NULL) {
          fprintf(out, "{\"crossed_at\": %.6f, \"usage\": %lld, \"rate\": %.0f}\n", at, used,
                  (double)(offset - start) / (at - began > 1e-9 ? at - began : 1e-9));
          fclose(out);
        }
      }
    }
  }
}

static int hold(char **argv) {
  size_t bytes = strtoull(argv[0], NULL, 10) / 4096 * 4096;
  populate(bytes, bytes + 4096);
  printf("holding\n");
  fflush(stdout);
  sleep_forever();
  return 0;
}

static int fill(char **argv) {
  size_t total = strtoull(argv[1], NULL, 10) * MIB;
  double rate = strtod(argv[2], NULL) * (double)MIB;
  int fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) { perror(argv[0]); return 1; }
  static char block[1 << 20];
  memset(block, 'x', sizeof block); /* not zeros: no filesystem may keep it sparse */
  double began = now();
  for (size_t written = 0; written < total; written += MIB) {
    if (write(fd, block, MIB) != (ssize_t)MIB) { perror("write"); break; }
    if (rate > 0) {
      double due = began + (double)(written + MIB) / rate;
      if (due > now()) nap(due - now());
    }
  }
  fsync(fd);
  close(fd);
  printf("filled\n");
  fflush(stdout);
  sleep_forever();
  return 0;
}

static int cache(char **argv) {
  size_t total = strtoull(argv[1], NULL, 10) * MIB;
  static char block[1 << 20];
  memset(block, 'c', sizeof block);
  int fd = open(argv[0], O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) { perror(argv[0]); return 1; }
  for (size_t written = 0; written < total; written += MIB) {
    if (write(fd, block, MIB) != (ssize_t)MIB) { perror("write"); return 1; }
  }
  fsync(fd);
  printf("cached\n");
  fflush(stdout);
  for (;;) {
    for (size_t at = 0; at < total; at += MIB) {
      if (pread(fd, block, MIB, (off_t)at) < 0) { perror("pread"); return 1; }
    }
    nap(1.0);
  }
}

int main(int argc, char **argv) {
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  if (argc >= 2 && strcmp(argv[1], "pause") == 0) sleep_forever();
  if (argc == 8 && strcmp(argv[1], "ramp") == 0) return ramp(argv + 2);
  if (argc == 3 && strcmp(argv[1], "hold") == 0) return hold(argv + 2);
  if (argc == 5 && strcmp(argv[1], "fill") == 0) return fill(argv + 2);
  if (argc == 4 && strcmp(argv[1], "cache") == 0) return cache(argv + 2);
  fprintf(stderr,
          "usage: workload pause | hold BYTES | ramp USAGE START CROSSING RATE RESULT GO |"
          " fill PATH MIB RATE_MIB | cache PATH MIB\n");
  return 2;
}
