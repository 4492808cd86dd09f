package blocklist.flinkharness;

/** What a bug in a job's own code throws: the enricher labels it {@code type=User}. */
public class UserFunctionException extends RuntimeException {
    public UserFunctionException(String message) {
        super(message);
    }
}
