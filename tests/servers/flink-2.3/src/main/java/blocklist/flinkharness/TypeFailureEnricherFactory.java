package blocklist.flinkharness;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.failure.FailureEnricher;
import org.apache.flink.core.failure.FailureEnricherFactory;

/**
 * Found by Flink's plugin manager through META-INF/services in the plugin jar; the enricher runs
 * only when {@code jobmanager.failure-enrichers} names {@link TypeFailureEnricher}.
 */
public class TypeFailureEnricherFactory implements FailureEnricherFactory {
    @Override
    public FailureEnricher createFailureEnricher(Configuration conf) {
        return new TypeFailureEnricher();
    }
}
