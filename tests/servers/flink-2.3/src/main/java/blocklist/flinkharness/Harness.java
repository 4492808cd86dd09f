package blocklist.flinkharness;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.apache.flink.configuration.ConfigConstants;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.plugin.PluginUtils;
import org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint;
import org.apache.flink.runtime.taskexecutor.TaskExecutorResourceUtils;
import org.apache.flink.runtime.taskexecutor.TaskManagerRunner;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.legacy.DiscardingSink;

/**
 * A real Flink cluster in one JVM, driven over stdin: a standalone session JobManager (REST on
 * {@code --host}:{@code --rest-port}, 0 for any free port) and one TaskManager per id of {@code
 * --taskmanagers}, each with that id as its resource id and {@code --slots} slots.
 *
 * <pre>
 * java -jar harness.jar --rest-port PORT --taskmanagers tm-1,tm-2 --slots 2 --dir DIR
 *      [--plugins PLUGINS_DIR] [--host 127.0.0.1]
 * </pre>
 *
 * <p>Stdout is the protocol and nothing else: one line {@code READY <restPort>} once the REST API
 * lists every TaskManager, then one answer line per command line read from stdin:
 *
 * <ul>
 *   <li>{@code submit NAME PARALLELISM FAILON EXCEPTION TIMES DELAYMS} → {@code JOB NAME <jobId>}:
 *       an endless streaming job ({@link FailingSource}) whose subtasks on the TaskManagers of
 *       FAILON (ids joined by commas, {@code *} for all, {@code -} for none) throw a new EXCEPTION
 *       (a class with a (String) constructor) DELAYMS after they start, TIMES times each. The answer
 *       comes once the JobManager has accepted the job, not when it runs.
 *   <li>{@code cancel JOBID} → {@code CANCELLED JOBID} once the job has reached a terminal state.
 *   <li>{@code stop} → {@code STOPPED}, then the cluster shuts down and the JVM exits 0; so it does
 *       at the end of stdin, without an answer.
 * </ul>
 *
 * A command that fails answers {@code ERROR <message>}. Flink logs at WARN to stderr (slf4j-simple;
 * {@code -Dorg.slf4j.simpleLogger.defaultLogLevel=info} for more), and every directory it writes
 * (temp, working, blob, web) is inside {@code --dir}, {@code java.io.tmpdir} included.
 *
 * <p>With {@code --plugins}, Flink loads the plugins of that directory (one subdirectory of jars
 * each) and runs {@link TypeFailureEnricher} on every failure. Flink reads the plugins directory
 * only from the environment variable FLINK_PLUGINS_DIR: the harness sets it in its own
 * environment (the jar's manifest opens java.util for that); a caller may set it instead.
 */
public final class Harness {
    private final String host;
    private final List<String> taskManagerIds;
    private final StandaloneSessionClusterEntrypoint jobManager;
    private final List<TaskManagerRunner> taskManagers = new ArrayList<>();
    private final int restPort;
    private final PrintStream out;
    private final HttpClient http = HttpClient.newHttpClient();
    private final ObjectMapper json = new ObjectMapper();
    private volatile boolean stopping;

    public static void main(String[] args) throws Exception {
        // Stdout is the protocol: whatever else prints there goes to stderr.
        PrintStream out =
                new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        // Warnings that only say this is not a distribution's layout.
        for (String quiet :
                List.of(
                        "org.apache.flink.core.plugin.PluginConfig",
                        "org.apache.flink.runtime.webmonitor.WebMonitorUtils",
                        "org.apache.flink.runtime.security.token.DefaultDelegationTokenManager")) {
            if (System.getProperty("org.slf4j.simpleLogger.log." + quiet) == null) {
                System.setProperty("org.slf4j.simpleLogger.log." + quiet, "error");
            }
        }
        try {
            Map<String, String> flags = parseFlags(args);
            String dirFlag = flags.get("dir");
            String tmFlag = flags.get("taskmanagers");
            if (dirFlag == null || tmFlag == null) {
                throw new IllegalArgumentException("--dir and --taskmanagers are required");
            }
            Path dir = Path.of(dirFlag).toAbsolutePath();
            Files.createDirectories(dir.resolve("tmp"));
            System.setProperty("java.io.tmpdir", dir.resolve("tmp").toString());
            String plugins = flags.get("plugins");
            if (plugins != null) {
                setEnv(ConfigConstants.ENV_FLINK_PLUGINS_DIR, new File(plugins).getAbsolutePath());
            }
            Harness harness =
                    new Harness(
                            flags.getOrDefault("host", "127.0.0.1"),
                            Integer.parseInt(flags.getOrDefault("rest-port", "0")),
                            List.of(tmFlag.split(",")),
                            Integer.parseInt(flags.getOrDefault("slots", "2")),
                            dir,
                            plugins != null,
                            out);
            harness.awaitTaskManagers(Duration.ofSeconds(120));
            out.println("READY " + harness.restPort);
            harness.serve(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)));
        } catch (Throwable t) {
            System.err.println("flink harness: " + t);
            t.printStackTrace();
            System.err.flush();
            // Flink's threads would keep the JVM alive, and its shutdown hooks can hang.
            Runtime.getRuntime().halt(1);
        }
    }

    private static Map<String, String> parseFlags(String[] args) {
        Set<String> known = Set.of("rest-port", "taskmanagers", "slots", "dir", "plugins", "host");
        Map<String, String> flags = new HashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            String name = args[i].startsWith("--") ? args[i].substring(2) : null;
            if (name == null || !known.contains(name) || i + 1 >= args.length) {
                throw new IllegalArgumentException(
                        "usage: --rest-port PORT --taskmanagers ID,ID,... --slots N --dir DIR"
                                + " [--plugins DIR] [--host ADDRESS]; not understood: "
                                + args[i]);
            }
            flags.put(name, args[i + 1]);
        }
        return flags;
    }

    /** Sets a variable in this JVM's own view of its environment, which Flink reads. */
    @SuppressWarnings("unchecked")
    private static void setEnv(String name, String value) throws ReflectiveOperationException {
        if (value.equals(System.getenv(name))) {
            return;
        }
        Map<String, String> env = System.getenv();
        Field field = env.getClass().getDeclaredField("m");
        try {
            field.setAccessible(true);
        } catch (RuntimeException e) {
            throw new IllegalStateException(
                    "cannot set "
                            + name
                            + " for --plugins (run with java -jar, or --add-opens"
                            + " java.base/java.util=ALL-UNNAMED, or set it in the environment)",
                    e);
        }
        ((Map<String, String>) field.get(env)).put(name, value);
    }

    private Harness(
            String host,
            int restPort,
            List<String> taskManagerIds,
            int slots,
            Path dir,
            boolean enrich,
            PrintStream out)
            throws Exception {
        this.host = host;
        this.taskManagerIds = taskManagerIds;
        this.out = out;

        // Flink creates some of its directories, not all (the JAAS file's, for one).
        for (String sub : List.of("work", "jobmanager/tmp", "jobmanager/web")) {
            Files.createDirectories(dir.resolve(sub));
        }
        for (String id : taskManagerIds) {
            Files.createDirectories(dir.resolve(id).resolve("tmp"));
        }

        Map<String, String> common = new LinkedHashMap<>();
        common.put("jobmanager.rpc.address", host);
        common.put("jobmanager.bind-host", host);
        common.put("high-availability.type", "NONE");
        common.put("taskmanager.numberOfTaskSlots", Integer.toString(slots));
        common.put("process.working-dir", dir.resolve("work").toString());
        common.put("cluster.uncaught-exception-handling", "LOG");
        common.put("metrics.internal.query-service.port", "0");

        Map<String, String> jm = new LinkedHashMap<>(common);
        jm.put("jobmanager.rpc.port", "0");
        jm.put("rest.address", host);
        jm.put("rest.bind-address", host);
        jm.put("rest.port", Integer.toString(restPort));
        jm.put("rest.bind-port", Integer.toString(restPort));
        jm.put("io.tmp.dirs", dir.resolve("jobmanager").resolve("tmp").toString());
        jm.put("web.tmpdir", dir.resolve("jobmanager").resolve("web").toString());
        jm.put("web.upload.dir", dir.resolve("jobmanager").resolve("web").toString());
        // Failures visible in REST about 1 s after they happen (3 s of caching by default).
        jm.put("rest.cache.execution-graph.timeout", "100 ms");
        jm.put("web.refresh-interval", "100 ms");
        jm.put("restart-strategy.type", "fixed-delay");
        jm.put("restart-strategy.fixed-delay.attempts", "1000000");
        jm.put("restart-strategy.fixed-delay.delay", "500 ms");
        jm.put("jobmanager.execution.failover-strategy", "region");
        // Every job spread over every task manager, one slot each where it can: a job of
        // parallelism 4 on four task managers runs a subtask on each, so a failure injected
        // on one of them happens whatever jobs came before.
        jm.put("taskmanager.load-balance.mode", "SLOTS");
        if (enrich) {
            // By name: the enricher is in the plugin jar only, not on this class path.
            jm.put("jobmanager.failure-enrichers", "blocklist.flinkharness.TypeFailureEnricher");
        }
        jobManager = new StandaloneSessionClusterEntrypoint(Configuration.fromMap(jm));
        jobManager.startCluster();
        this.restPort = jobManager.getRestPort();
        int rpcPort = jobManager.getRpcPort();
        jobManager
                .getTerminationFuture()
                .whenComplete(
                        (status, error) -> {
                            if (!stopping) {
                                System.err.println(
                                        "flink harness: the JobManager stopped: " + status + " " + error);
                                Runtime.getRuntime().halt(1);
                            }
                        });

        // The TaskManagers start side by side: each loads its own RPC system.
        List<CompletableFuture<TaskManagerRunner>> starting = new ArrayList<>();
        for (String id : taskManagerIds) {
            Map<String, String> tm = new LinkedHashMap<>(common);
            tm.put("jobmanager.rpc.port", Integer.toString(rpcPort));
            tm.put("taskmanager.resource-id", id);
            tm.put("taskmanager.host", host);
            tm.put("taskmanager.bind-host", host);
            tm.put("taskmanager.rpc.port", "0");
            tm.put("taskmanager.data.port", "0");
            tm.put("io.tmp.dirs", dir.resolve(id).resolve("tmp").toString());
            // Network buffers are allocated up front: 16 MB, not local execution's 64 MB, saves
            // about 200 MB of RSS with four TaskManagers (512 buffers each is plenty here).
            tm.put("taskmanager.memory.network.min", "16m");
            tm.put("taskmanager.memory.network.max", "16m");
            Configuration conf =
                    TaskExecutorResourceUtils.adjustForLocalExecution(Configuration.fromMap(tm));
            starting.add(
                    CompletableFuture.supplyAsync(
                            () -> {
                                try {
                                    TaskManagerRunner runner =
                                            new TaskManagerRunner(
                                                    conf,
                                                    PluginUtils.createPluginManagerFromRootFolder(conf),
                                                    TaskManagerRunner::createTaskExecutorService);
                                    runner.start();
                                    return runner;
                                } catch (Exception e) {
                                    throw new CompletionException("TaskManager " + id, e);
                                }
                            },
                            runnable -> new Thread(runnable, "start-" + id).start()));
        }
        for (CompletableFuture<TaskManagerRunner> runner : starting) {
            taskManagers.add(runner.join());
        }
    }

    private JsonNode get(String path) throws Exception {
        HttpResponse<String> response =
                http.send(
                        HttpRequest.newBuilder(URI.create(url(path)))
                                .timeout(Duration.ofSeconds(10))
                                .build(),
                        HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IllegalStateException("GET " + path + ": " + response.statusCode() + " " + response.body());
        }
        return json.readTree(response.body());
    }

    private String url(String path) {
        return "http://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + restPort + path;
    }

    /** Waits until the REST API lists every TaskManager. */
    private void awaitTaskManagers(Duration timeout) throws Exception {
        long deadline = System.nanoTime() + timeout.toNanos();
        Set<String> seen = Set.of();
        while (true) {
            try {
                Set<String> ids = new LinkedHashSet<>();
                for (JsonNode tm : get("/taskmanagers").path("taskmanagers")) {
                    ids.add(tm.path("id").asText());
                }
                seen = ids;
                if (ids.containsAll(taskManagerIds)) {
                    return;
                }
            } catch (Exception e) {
                // Not up yet.
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(
                        "TaskManagers " + taskManagerIds + " not all registered after " + timeout + ": " + seen);
            }
            Thread.sleep(50);
        }
    }

    private void serve(BufferedReader in) throws Exception {
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            if (words[0].isEmpty()) {
                continue;
            }
            String answer;
            try {
                answer =
                        switch (words[0]) {
                            case "submit" -> submit(words);
                            case "cancel" -> cancel(words);
                            case "stop" -> {
                                exit("STOPPED");
                                yield null;
                            }
                            default -> throw new IllegalArgumentException("unknown command: " + line);
                        };
            } catch (Exception e) {
                answer = "ERROR " + (words[0] + ": " + e).replaceAll("[\\r\\n]+", " ");
            }
            out.println(answer);
        }
        exit(null);
    }

    private String submit(String[] words) throws Exception {
        if (words.length != 7) {
            throw new IllegalArgumentException(
                    "usage: submit NAME PARALLELISM FAILON EXCEPTION TIMES DELAYMS");
        }
        String name = words[1];
        int parallelism = Integer.parseInt(words[2]);
        Set<String> failOn =
                switch (words[3]) {
                    case "*" -> null;
                    case "-" -> Set.of();
                    default -> new LinkedHashSet<>(Arrays.asList(words[3].split(",")));
                };
        String exception = words[4];
        // Fail here, not in every task, when the class will not do.
        FailingSource.exceptionConstructor(exception, Harness.class.getClassLoader());
        int times = Integer.parseInt(words[5]);
        long delayMs = Long.parseLong(words[6]);

        // The job's classes are on the cluster's own class path: no jar to ship.
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createRemoteEnvironment(host, restPort, new Configuration());
        env.setParallelism(parallelism);
        env.addSource(new FailingSource(failOn == null ? null : Set.copyOf(failOn), exception, times, delayMs))
                .name(name)
                // A legacy sink: a legacy source does not chain with a Sink V2 writer.
                .addSink(new DiscardingSink<>())
                .name("discard");
        JobClient job = env.executeAsync(name);
        return "JOB " + name + " " + job.getJobID();
    }

    private String cancel(String[] words) throws Exception {
        if (words.length != 2 || !words[1].matches("[0-9a-f]{32}")) {
            throw new IllegalArgumentException("usage: cancel JOBID (32 hex digits)");
        }
        String id = words[1];
        HttpResponse<String> response =
                http.send(
                        HttpRequest.newBuilder(URI.create(url("/jobs/" + id + "?mode=cancel")))
                                .method("PATCH", HttpRequest.BodyPublishers.noBody())
                                .timeout(Duration.ofSeconds(10))
                                .build(),
                        HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 202) {
            throw new IllegalStateException(response.statusCode() + " " + response.body());
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        String state;
        do {
            Thread.sleep(50);
            state = get("/jobs/" + id).path("state").asText();
            if (Set.of("CANCELED", "FAILED", "FINISHED").contains(state)) {
                return "CANCELLED " + id;
            }
        } while (System.nanoTime() < deadline);
        throw new IllegalStateException("job " + id + " still " + state + " 30 s after cancelling");
    }

    /** Stops the JobManager and the TaskManagers, waiting at most 10 s, and exits. */
    private void exit(String answer) {
        stopping = true;
        List<CompletableFuture<?>> closing = new ArrayList<>();
        closing.add(jobManager.closeAsync());
        for (TaskManagerRunner tm : taskManagers) {
            closing.add(tm.closeAsync());
        }
        try {
            CompletableFuture.allOf(closing.toArray(CompletableFuture[]::new)).get(10, TimeUnit.SECONDS);
        } catch (Exception e) {
            System.err.println("flink harness: shutdown: " + e);
        }
        if (answer != null) {
            out.println(answer);
        }
        // Everything is closed: the shutdown hooks have nothing left to do but could still hang.
        Runtime.getRuntime().halt(0);
    }
}
