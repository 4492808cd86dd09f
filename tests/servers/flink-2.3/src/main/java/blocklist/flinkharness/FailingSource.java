package blocklist.flinkharness;

import java.lang.reflect.Constructor;
import java.util.Set;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.streaming.api.functions.source.legacy.RichParallelSourceFunction;
import org.apache.flink.streaming.api.operators.StreamingRuntimeContext;

/**
 * An endless source that emits nothing and, on the chosen TaskManagers, throws a chosen exception
 * {@code delayMs} after it starts, while its attempt number is below {@code times}: each of its
 * subtasks there fails exactly {@code times} times, then runs on.
 */
public class FailingSource extends RichParallelSourceFunction<Long> {
    private static final long serialVersionUID = 1L;

    /** The TaskManager ids to fail on; null stands for every one. */
    private final Set<String> failOn;

    private final String exception;
    private final int times;
    private final long delayMs;
    private volatile boolean running = true;

    public FailingSource(Set<String> failOn, String exception, int times, long delayMs) {
        this.failOn = failOn;
        this.exception = exception;
        this.times = times;
        this.delayMs = delayMs;
    }

    /** The (String) constructor of the exception class, or why there is none. */
    static Constructor<? extends Throwable> exceptionConstructor(String name, ClassLoader loader)
            throws ReflectiveOperationException {
        Class<? extends Throwable> type =
                Class.forName(name, true, loader).asSubclass(Throwable.class);
        return type.getConstructor(String.class);
    }

    @Override
    public void run(SourceContext<Long> ctx) throws Exception {
        // Flink 2's RuntimeContext no longer tells the TaskManager; the streaming one still does.
        String taskManager =
                ((StreamingRuntimeContext) getRuntimeContext())
                        .getTaskManagerRuntimeInfo()
                        .getConfiguration()
                        .get(TaskManagerOptions.TASK_MANAGER_RESOURCE_ID);
        int attempt = getRuntimeContext().getTaskInfo().getAttemptNumber();
        boolean fail = attempt < times && (failOn == null || failOn.contains(taskManager));
        long failAt = System.nanoTime() + delayMs * 1_000_000L;
        while (running) {
            long left = failAt - System.nanoTime();
            if (fail && left <= 0) {
                throw FailingSource.<RuntimeException>sneaky(
                        exceptionConstructor(exception, getClass().getClassLoader())
                                .newInstance("injected failure on " + taskManager));
            }
            Thread.sleep(fail ? Math.max(1, Math.min(left / 1_000_000L, 100)) : 100);
        }
    }

    @Override
    public void cancel() {
        running = false;
    }

    /** Throws any throwable, checked or not, as it is. */
    @SuppressWarnings("unchecked")
    private static <T extends Throwable> T sneaky(Throwable t) throws T {
        throw (T) t;
    }
}
