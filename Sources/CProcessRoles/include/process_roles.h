/* A host program's executable as its own workers' and fork server's (process_roles.c). */
#ifndef SP_PROCESS_ROLES_H
#define SP_PROCESS_ROLES_H

/* 1 when this executable has the worker's code linked in (`sp_worker_main`), so that it can be
   started as a worker (SP_PROCESS_ROLE=worker) or as the fork server
   (SP_FORKSERVER_LIBRARY=@program); 0 otherwise. */
int sp_program_serves_workers(void);

#endif
