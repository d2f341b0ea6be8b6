/* The fork server's loop (fork_server.c; docs/sandbox.md "The fork server"), shared by the
   `plugin-forkserver` executable and by a host program's own executable started as its fork
   server (Sources/CProcessRoles). Plain C: no Swift code runs in it. */
#ifndef SP_FORK_SERVER_H
#define SP_FORK_SERVER_H

/* The worker's entry point (`sp_worker_main`, PluginWorker): never returns. */
typedef int (*sp_worker_entry)(void);

/* The value of SP_FORKSERVER_LIBRARY that says the worker's code is in this executable already
   (a host program serving as its own fork server): nothing is loaded. */
#define SP_FORKSERVER_PROGRAM "@program"

/* Runs the fork server with the process's arguments and environment as the kernel laid them out
   (main's, or a constructor's). `builtin`: the worker's entry when this executable has it linked
   in (then SP_FORKSERVER_LIBRARY is SP_FORKSERVER_PROGRAM); NULL to dlopen SP_FORKSERVER_LIBRARY
   and find `sp_worker_main` there. Returns the process's exit status once the supervisor has gone;
   a forked worker never returns from it. */
int sp_fork_server_run(int argc, char **argv, sp_worker_entry builtin);

#endif
