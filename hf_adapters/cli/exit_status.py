"""The exit statuses of a command stopped by a signal, as a shell gives them (128 + the signal's number)."""

#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell gives it.
INTERRUPTED = 130
#: The exit status of a command stopped by SIGTERM (128 + SIGTERM), as a shell gives it.
TERMINATED = 143
#: The exit status of a command whose output's reader stopped reading (128 + SIGPIPE), as a shell gives it.
BROKEN_PIPE = 141
