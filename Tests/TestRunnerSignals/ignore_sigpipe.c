// The relay binary ignores SIGPIPE at start-up (TerminationSignals), so a peer that closes mid-write gives EPIPE to
// that one write. The in-process tests run its components inside the test runner, which must do the same before
// any test starts: suites run in parallel, and the first socket or pipe closed under a write would otherwise end
// every test at once ("exited with unexpected signal code 13"). A constructor runs when the runner is loaded,
// before Swift Testing or XCTest start a suite, whichever suite comes first.
#include <signal.h>
#include <stddef.h>

#include "TestRunnerSignals.h"

static int ignored_at_load = 0;

__attribute__((constructor)) static void ignore_sigpipe(void) {
    ignored_at_load = signal(SIGPIPE, SIG_IGN) != SIG_ERR;
}

int test_runner_ignored_sigpipe_at_load(void) { return ignored_at_load; }

int test_runner_ignores_sigpipe_now(void) {
    struct sigaction current;
    return sigaction(SIGPIPE, NULL, &current) == 0 && current.sa_handler == SIG_IGN;
}
