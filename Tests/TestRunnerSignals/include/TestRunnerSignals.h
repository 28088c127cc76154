#ifndef TEST_RUNNER_SIGNALS_H
#define TEST_RUNNER_SIGNALS_H

/// 1 when this module's constructor set SIGPIPE to be ignored as the test runner was loaded, before any test.
/// Referencing it also keeps the constructor's object file in the test runner.
int test_runner_ignored_sigpipe_at_load(void);

/// 1 while SIGPIPE's disposition is "ignore".
int test_runner_ignores_sigpipe_now(void);

#endif
