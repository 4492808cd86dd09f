package blocklist.flinkharness;

import java.io.IOException;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.core.failure.FailureEnricher;
import org.apache.flink.util.SerializedThrowable;

/**
 * Labels every failure {@code type=System} when the throwable or one of its causes is an {@link
 * IOException} (the machine or the network failed), else {@code type=User} (the job's code did).
 *
 * <p>It runs in a plugin class loader that sees only its own jar, {@code java.*} and {@code
 * org.apache.flink.*}: a cause the JobManager could not deserialize arrives as a {@link
 * SerializedThrowable}, judged by the name of the class it stands for.
 */
public class TypeFailureEnricher implements FailureEnricher {
    static final String KEY = "type";

    @Override
    public Set<String> getOutputKeys() {
        return Set.of(KEY);
    }

    @Override
    public CompletableFuture<Map<String, String>> processFailure(Throwable cause, Context context) {
        return CompletableFuture.completedFuture(Map.of(KEY, isSystem(cause) ? "System" : "User"));
    }

    static boolean isSystem(Throwable cause) {
        for (Throwable t = cause; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t instanceof IOException) {
                return true;
            }
            if (t instanceof SerializedThrowable) {
                try {
                    Class<?> original =
                            Class.forName(
                                    ((SerializedThrowable) t).getOriginalErrorClassName(),
                                    false,
                                    IOException.class.getClassLoader());
                    if (IOException.class.isAssignableFrom(original)) {
                        return true;
                    }
                } catch (ClassNotFoundException | LinkageError e) {
                    // Not a JDK class, so not an IOException of the JDK's.
                }
            }
        }
        return false;
    }
}
