import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// The executor of `.inline` methods (`MethodExecution.inline`): it runs their jobs on the
/// worker's thread that delivered the message which made them ready (a call starts its method; a
/// reply resumes the method that awaited it), right after that message is handled and before
/// `receive` returns, instead of waking a thread of the global executor. Jobs made ready anywhere
/// else (a timer, another task) go to a global queue's thread.
///
/// `receive` is never called on two threads at once (the ABI's contract), and each thread's queue
/// is its own, so a queue is only ever touched by its thread.
final class DeliveryExecutor: TaskExecutor {
    static let shared = DeliveryExecutor()

    /// One thread's jobs to run before its delivery ends.
    private final class Queue {
        var delivering = false
        var jobs: [UnownedJob] = []
    }

    /// Each thread's `Queue`, made the first time it delivers, released when the thread ends.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { raw in
            if let raw { Unmanaged<Queue>.fromOpaque(raw).release() }
        }
        return key
    }()

    func enqueue(_ job: consuming ExecutorJob) {
        if let raw = pthread_getspecific(Self.key) {
            let queue = Unmanaged<Queue>.fromOpaque(raw).takeUnretainedValue()
            if queue.delivering {
                queue.jobs.append(UnownedJob(job))
                return
            }
        }
        // Run by a global queue's thread as this executor's job, not handed to the global executor:
        // a job the global executor runs is not on its task's preferred executor, so the task would
        // hop again at its next call into a nonisolated async function.
        let unowned = UnownedJob(job)
        DispatchQueue.global().async { unowned.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Delivers with `body`, then runs the jobs made ready on this thread meanwhile (and those they
    /// make ready) before returning.
    func delivering(_ body: () -> Void) {
        let queue: Queue
        if let raw = pthread_getspecific(Self.key) {
            queue = Unmanaged<Queue>.fromOpaque(raw).takeUnretainedValue()
        } else {
            queue = Queue()
            pthread_setspecific(Self.key, Unmanaged.passRetained(queue).toOpaque())
        }
        // Already delivering on this thread (a nested delivery): the outer one runs the jobs.
        guard !queue.delivering else { return body() }
        queue.delivering = true
        body()
        var next = 0
        while next < queue.jobs.count {
            let job = queue.jobs[next]
            next += 1
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
        if next > 0 { queue.jobs.removeAll(keepingCapacity: true) }
        queue.delivering = false
    }
}
