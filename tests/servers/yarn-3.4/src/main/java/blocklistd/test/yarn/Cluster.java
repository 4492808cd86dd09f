package blocklistd.test.yarn;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.inject.servlet.GuiceFilter;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.logging.Level;
import java.util.logging.LogManager;
import java.util.logging.Logger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CommonConfigurationKeys;
import org.apache.hadoop.http.HttpConfig;
import org.apache.hadoop.security.Groups;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;
import org.apache.hadoop.yarn.server.resourcemanager.ClusterMetrics;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;
import org.apache.hadoop.yarn.server.resourcemanager.recovery.FileSystemRMStateStore;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.QueueMetrics;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler;
import org.apache.hadoop.yarn.webapp.WebApp;
import org.apache.hadoop.yarn.webapp.util.WebAppUtils;

/**
 * A real YARN 3.4 cluster in one JVM for the tests of blocklist-yarn, driven over stdin: one
 * ResourceManager (MiniYARNCluster) with centralized node labels, ACLs and work-preserving
 * recovery, one NodeManager per host of {@code --nodes}, and an unmanaged application master.
 *
 * <pre>
 * yarn-cluster [--dir] DIR [[--rest-port] PORT] --nodes HOST,HOST,... [--admin USER]
 *              [--memory-mb 4096] [--vcores 4] [--queue-admin-acl ACL] [--app-user flink] [--https]
 * </pre>
 *
 * <p>{@code --nodes 127.0.0.2,127.0.0.2,127.0.0.3} starts three NodeManagers, the first two on
 * the same host: each listens on its host (all of 127.0.0.0/8 is loopback on Linux), and YARN names
 * it {@code <canonical name of that address>:<port>}, which is the IP itself for an address with no
 * name (127.0.0.1 is "localhost"). {@code --nodes worker-a=127.0.0.2,worker-a=127.0.0.2,...} names
 * the address for this JVM: the node ids are then {@code worker-a:<port>}. The REST API is on
 * 127.0.0.1:PORT (0, the default: any free port); {@code --admin} (default "blocklist") is the only YARN admin: with simple authentication,
 * {@code ?user.name=blocklist} may change node labels. The application belongs to {@code
 * --app-user} (default "flink"), not to the user running the JVM, which is the ResourceManager's
 * own: some REST calls act as the RM's user (signalling a container does). Every queue's
 * administrators are {@code --queue-admin-acl} (default " ", nobody: the YARN admins still are).
 * Everything is written under DIR.
 *
 * <p>{@code --https}: the REST API is served over https only ({@code yarn.http.policy=HTTPS_ONLY},
 * on the same 127.0.0.1:PORT), with a certificate for 127.0.0.1 and localhost signed by a CA made
 * at start under DIR/tls (see {@link Tls}); the ready line's URL is then {@code
 * https://127.0.0.1:PORT} and it carries {@code "ca"}, the path of that CA's PEM file. The
 * NodeManagers' web apps stay on http: the certificate does not name their hosts, and nothing
 * here calls them.
 *
 * <p>Stdout is the protocol: one JSON line {@code {"ready":true,"rest":URL,["ca":PEM,]"admin":USER,
 * "nodes":[node ids in the order of --nodes],"app":APPID}}, then one JSON line per command read
 * from stdin ({@code {"error":MESSAGE}} when it fails):
 *
 * <ul>
 *   <li>{@code ask N}: N containers of 1 GiB and 1 vcore, no node label expression, launched (a
 *       shell that sleeps, see {@link AppMaster}) and RUNNING in the RM's eyes; those not given
 *       within ~3 s of the last one stay unallocated and are withdrawn → {@code
 *       {"allocated":{NODE:COUNT},"containers":[{"id","node","host"}],"pending":K}}.
 *   <li>{@code release} → {@code {"released":N}} once every container held is released and its
 *       process gone.
 *   <li>{@code status} → {@code {"app","running":{NODE:COUNT},"containers":[{"id","node","host",
 *       "state"}],"completed":[{"id","node","exit_status","diagnostics","seen_at_ms"}]}}: the
 *       containers held, with the RM's state of each, and the last completions YARN reported for
 *       containers this master did not release itself (signalled ones, say).
 *   <li>{@code restart-rm} → {@code {"restarted":true,"rest_seconds","nodes_seconds","am","app",
 *       "seconds"}}: a new ResourceManager on the same ports, recovering applications, containers
 *       and node labels from DIR; the application master re-registers ("am": its attempt's state
 *       in the new RM).
 *   <li>{@code new-app} → {@code {"app":APPID}}: the application master finishes its application
 *       (its containers stopped) and starts another.
 *   <li>{@code quit} → {@code {"quit":true}} once the application has finished and its containers
 *       are gone; then the JVM exits 0 (so it does at the end of stdin).
 * </ul>
 *
 * Logs go to stderr, Hadoop's at WARN.
 */
public final class Cluster {
    static final ObjectMapper JSON = new ObjectMapper();
    /** Held: java.util.logging keeps loggers weakly, and would forget the level set. */
    private static final Logger GUICE_FILTER_LOG = Logger.getLogger(GuiceFilter.class.getName());

    private final Path dir;
    private final String admin;
    private final List<String> hosts;
    private final int memoryMb;
    private final int vcores;
    private final String appUser;
    /** With --https, the certificates the RM's web app serves; otherwise null. */
    private final Tls tls;
    private final MiniYARNCluster yarn;
    private final List<NodeManager> nodeManagers = new ArrayList<>();
    private AppMaster appMaster;

    public static void main(String[] args) {
        // Stdout is the protocol: whatever else prints there goes to stderr.
        PrintStream out =
                new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        // Jersey and Guice log through java.util.logging, at INFO for every request class.
        LogManager.getLogManager().reset();
        Logger root = Logger.getLogger("");
        root.setLevel(Level.WARNING);
        java.util.logging.ConsoleHandler handler = new java.util.logging.ConsoleHandler();
        handler.setLevel(Level.WARNING);
        root.addHandler(handler);
        // "Multiple Servlet injectors detected": expected, several web apps share this JVM.
        GUICE_FILTER_LOG.setLevel(Level.OFF);
        long started = System.nanoTime();
        try {
            Map<String, String> flags = parseFlags(args);
            Path dir = Path.of(flags.get("dir")).toAbsolutePath();
            // Before any Hadoop class reads them.
            Files.createDirectories(dir.resolve("tmp"));
            System.setProperty("java.io.tmpdir", dir.resolve("tmp").toString());
            System.setProperty("test.build.data", dir.resolve("data").toString());
            System.setProperty("hadoop.log.dir", dir.resolve("logs").toString());
            List<String> hosts = nameHosts(List.of(flags.get("nodes").split(",")), dir);
            Tls tls = flags.containsKey("https") ? Tls.make(dir.resolve("tls")) : null;
            Cluster cluster =
                    new Cluster(
                            dir,
                            hosts,
                            flags.getOrDefault("admin", "blocklist"),
                            Integer.parseInt(flags.getOrDefault("memory-mb", "4096")),
                            Integer.parseInt(flags.getOrDefault("vcores", "4")),
                            Integer.parseInt(flags.getOrDefault("rest-port", "0")),
                            flags.getOrDefault("queue-admin-acl", " "),
                            flags.getOrDefault("app-user", "flink"),
                            tls);
            ObjectNode ready = cluster.start();
            System.err.printf("yarn-cluster: ready in %.1f s%n", (System.nanoTime() - started) / 1e9);
            out.println(ready);
            boolean quit =
                    cluster.serve(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)), out);
            cluster.finish();
            if (quit) {
                out.println(JSON.createObjectNode().put("quit", true));
            }
            // Not a stop of each service: a NodeManager waits 10 s for its log deletions to run.
            // Nothing is left to save, and the containers are gone.
            System.err.flush();
            Runtime.getRuntime().halt(0);
        } catch (Throwable t) {
            System.err.println("yarn-cluster: " + t);
            if (!(t instanceof IllegalArgumentException)) {
                t.printStackTrace();
            }
            System.err.flush();
            // Hadoop's non-daemon threads would keep the JVM alive, and its shutdown hooks can hang.
            Runtime.getRuntime().halt(1);
        }
    }

    /**
     * DIR and PORT may also come first, without their flags: {@code yarn-cluster DIR 0 --nodes ...}.
     * A switch ({@code --https}) takes no value; it is in the map when given.
     */
    private static Map<String, String> parseFlags(String[] args) {
        Set<String> known =
                Set.of("dir", "nodes", "rest-port", "admin", "memory-mb", "vcores", "queue-admin-acl", "app-user");
        Set<String> switches = Set.of("https");
        Map<String, String> flags = new HashMap<>();
        int i = 0;
        for (String positional : List.of("dir", "rest-port")) {
            if (i < args.length && !args[i].startsWith("--")) {
                flags.put(positional, args[i++]);
            }
        }
        while (i < args.length) {
            String name = args[i].startsWith("--") ? args[i].substring(2) : null;
            if (name != null && switches.contains(name)) {
                flags.put(name, "true");
                i += 1;
                continue;
            }
            if (name == null || !known.contains(name) || i + 1 >= args.length) {
                throw new IllegalArgumentException(
                        "usage: yarn-cluster [--dir] DIR [[--rest-port] PORT] --nodes HOST,HOST,..."
                                + " [--admin USER] [--memory-mb MB] [--vcores N] [--queue-admin-acl ACL]"
                                + " [--app-user USER] [--https];"
                                + " not understood: "
                                + args[i]);
            }
            flags.put(name, args[i + 1]);
            i += 2;
        }
        if (!flags.containsKey("dir") || !flags.containsKey("nodes")) {
            throw new IllegalArgumentException("--dir and --nodes are required");
        }
        return flags;
    }

    /**
     * The NodeManagers' hosts: each spec is an address (or a name this machine resolves), or
     * NAME=ADDRESS. A NodeManager is named by a reverse lookup of its address, which gives the
     * address itself when nothing names it, so names come from a hosts file of this JVM's own
     * (DIR/hosts, through jdk.net.hosts.file): the given names first, so that they win the reverse
     * lookups, then /etc/hosts and this machine's name, so that the rest resolves as before. Called
     * before anything resolves a name: the JVM reads jdk.net.hosts.file once.
     */
    static List<String> nameHosts(List<String> specs, Path dir) throws java.io.IOException {
        Map<String, String> addressOf = new LinkedHashMap<>();
        Map<String, String> nameOf = new HashMap<>();
        List<String> hosts = new ArrayList<>();
        for (String spec : specs) {
            int eq = spec.indexOf('=');
            if (eq < 0) {
                hosts.add(spec);
                continue;
            }
            String name = spec.substring(0, eq);
            String address = spec.substring(eq + 1);
            String known = addressOf.putIfAbsent(name, address);
            String knownName = nameOf.putIfAbsent(address, name);
            if ((known != null && !known.equals(address)) || (knownName != null && !knownName.equals(name))) {
                throw new IllegalArgumentException("--nodes: one address per name and one name per address: " + spec);
            }
            hosts.add(name);
        }
        if (!addressOf.isEmpty()) {
            StringBuilder file = new StringBuilder();
            addressOf.forEach((name, address) -> file.append(address).append(' ').append(name).append('\n'));
            file.append(Files.readString(Path.of("/etc/hosts"))).append('\n');
            String self = Files.readString(Path.of("/proc/sys/kernel/hostname")).trim();
            file.append("127.0.0.1 ").append(self).append('\n');
            Path hostsFile = dir.resolve("hosts");
            Files.writeString(hostsFile, file);
            System.setProperty("jdk.net.hosts.file", hostsFile.toString());
        }
        return hosts;
    }

    private Cluster(
            Path dir,
            List<String> hosts,
            String admin,
            int memoryMb,
            int vcores,
            int restPort,
            String queueAdminAcl,
            String appUser,
            Tls tls) {
        this.dir = dir;
        this.hosts = hosts;
        this.admin = admin;
        this.memoryMb = memoryMb;
        this.vcores = vcores;
        this.appUser = appUser;
        this.tls = tls;

        YarnConfiguration conf = new YarnConfiguration();
        // Every address given: with fixed ports, MiniYARNCluster leaves them alone, and a port 0 is
        // replaced in this configuration by the one bound, so that restart-rm binds the same ones
        // (without fixed ports it would take the defaults, 8030-8033, on a restart).
        conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
        conf.set(YarnConfiguration.RM_HOSTNAME, "127.0.0.1");
        conf.set(YarnConfiguration.RM_ADDRESS, "127.0.0.1:0");
        conf.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, "127.0.0.1:0");
        conf.set(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, "127.0.0.1:0");
        conf.set(YarnConfiguration.RM_ADMIN_ADDRESS, "127.0.0.1:0");
        // The REST port goes to the address of the scheme served; the other one is not bound.
        conf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, "127.0.0.1:" + (tls == null ? restPort : 0));
        conf.set(YarnConfiguration.RM_WEBAPP_HTTPS_ADDRESS, "127.0.0.1:" + (tls == null ? 0 : restPort));
        if (tls != null) {
            // YARN's web apps serve one scheme or the other: with HTTPS_ONLY nothing listens for
            // http, so a client that falls back to it fails rather than goes unnoticed.
            conf.set(YarnConfiguration.YARN_HTTP_POLICY_KEY, HttpConfig.Policy.HTTPS_ONLY.name());
            tls.configure(conf);
        }

        conf.set(YarnConfiguration.RM_SCHEDULER, CapacityScheduler.class.getName());
        conf.set("yarn.scheduler.capacity.root.queues", "default");
        conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
        conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
        // The root queue's ACLs default to "*", which would make everyone an administrator of every
        // application (allowed to kill it or signal its containers): only the application's owner
        // and the YARN admins, as on a cluster that uses ACLs.
        conf.set("yarn.scheduler.capacity.root.acl_submit_applications", "*");
        conf.set("yarn.scheduler.capacity.root.acl_administer_queue", queueAdminAcl);
        conf.set("yarn.scheduler.capacity.root.default.acl_administer_queue", queueAdminAcl);

        conf.setBoolean(YarnConfiguration.YARN_ACL_ENABLE, true);
        conf.set(YarnConfiguration.YARN_ADMIN_ACL, admin);
        // Users without groups, rather than a warning from the scheduler's placement rules for
        // each application (this machine knows neither user).
        conf.set(
                CommonConfigurationKeys.HADOOP_USER_GROUP_STATIC_OVERRIDES,
                "dr.who=;" + appUser + "=" + appUser + ";" + admin + "=" + admin);

        conf.setBoolean(YarnConfiguration.NODE_LABELS_ENABLED, true);
        conf.set(YarnConfiguration.NODELABEL_CONFIGURATION_TYPE, YarnConfiguration.CENTRALIZED_NODELABEL_CONFIGURATION_TYPE);
        conf.set(YarnConfiguration.FS_NODE_LABELS_STORE_ROOT_DIR, dir.resolve("node-labels").toUri().toString());
        conf.set(YarnConfiguration.FS_NODE_ATTRIBUTE_STORE_ROOT_DIR, dir.resolve("node-attributes").toUri().toString());

        // Work-preserving recovery, so that restart-rm keeps the application and its containers.
        conf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, true);
        conf.set(YarnConfiguration.RM_STORE, FileSystemRMStateStore.class.getName());
        conf.set(YarnConfiguration.FS_RM_STATE_STORE_URI, dir.resolve("rm-state").toUri().toString());
        conf.setBoolean(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_ENABLED, true);
        // After a restart the RM waits this long for the NodeManagers before it allocates (10 s).
        conf.setLong(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_SCHEDULING_WAIT_MS, 1000);
        // NodeManagers and the application master retry a missing RM every 30 s by default.
        conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 200);
        conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_MAX_WAIT_MS, 120_000);
        // Allocations happen on NodeManager heartbeats: twice a second rather than once.
        conf.setLong(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 500);

        conf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);
        // The user-to-groups service is a singleton, made from the first configuration that asks.
        Groups.getUserToGroupsMappingServiceWithLoadedConfiguration(conf);
        yarn = new MiniYARNCluster("yarn-cluster", 1, 0, 1, 1);
        yarn.init(conf);
    }

    private ObjectNode start() throws Exception {
        yarn.start();
        ResourceManager rm = yarn.getResourceManager();
        for (int i = 0; i < hosts.size(); i++) {
            nodeManagers.add(startNodeManager(i, hosts.get(i), rm.getConfig()));
        }
        // The NodeManagers' web apps started after the RM's and took over Guice's static pipeline.
        restoreRestApi(rm);
        awaitNodes(rm, 60_000);
        appMaster = AppMaster.start(new YarnConfiguration(rm.getConfig()), appUser, this::resourceManager);

        ObjectNode ready = JSON.createObjectNode();
        ready.put("ready", true);
        // The scheme and the address (its port bound, if it was 0) the RM's web app uses.
        ready.put("rest", WebAppUtils.getRMWebAppURLWithScheme(rm.getConfig()));
        if (tls != null) {
            ready.put("ca", tls.caPem().toString());
        }
        ready.put("admin", admin);
        ArrayNode ids = ready.putArray("nodes");
        for (NodeManager nm : nodeManagers) {
            ids.add(nm.getNMContext().getNodeId().toString());
        }
        ready.put("app", appMaster.applicationId().toString());
        return ready;
    }

    ResourceManager resourceManager() {
        return yarn.getResourceManager();
    }

    /**
     * A NodeManager of its own rather than MiniYARNCluster's, which puts every one on "localhost":
     * its RPC, localizer and web servers listen on {@code host}, and the NodeManager names itself
     * after the address its RPC server is bound to. It reaches the RM over RPC, as a real one does,
     * which is also what lets it re-register with a restarted RM.
     */
    private NodeManager startNodeManager(int index, String host, Configuration rmConf)
            throws Exception {
        Path nmDir = dir.resolve("nm-" + index);
        Files.createDirectories(nmDir.resolve("local"));
        Files.createDirectories(nmDir.resolve("logs"));
        YarnConfiguration conf = new YarnConfiguration(rmConf);
        conf.set(YarnConfiguration.NM_PREFIX + "hostname", host);
        conf.set(YarnConfiguration.NM_ADDRESS, host + ":0");
        conf.set(YarnConfiguration.NM_LOCALIZER_ADDRESS, host + ":0");
        conf.set(YarnConfiguration.NM_WEBAPP_ADDRESS, host + ":0");
        // On http even with --https (the RM's configuration says HTTPS_ONLY): the certificate
        // names the RM's address, not this host, and nothing here calls a NodeManager's web app.
        conf.set(YarnConfiguration.YARN_HTTP_POLICY_KEY, HttpConfig.Policy.HTTP_ONLY.name());
        conf.set(YarnConfiguration.NM_LOCAL_DIRS, nmDir.resolve("local").toString());
        conf.set(YarnConfiguration.NM_LOG_DIRS, nmDir.resolve("logs").toString());
        conf.setInt(YarnConfiguration.NM_PMEM_MB, memoryMb);
        conf.setInt(YarnConfiguration.NM_VCORES, vcores);
        conf.setBoolean(YarnConfiguration.NM_ENABLE_HARDWARE_CAPABILITY_DETECTION, false);
        // The containers only sleep; and a full disk must not make the node unhealthy.
        conf.setBoolean(YarnConfiguration.NM_CONTAINER_MONITOR_ENABLED, false);
        conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
        conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
        conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
        conf.setLong(YarnConfiguration.NM_MIN_PER_DISK_FREE_SPACE_MB, 0);
        conf.setBoolean(YarnConfiguration.NM_RECOVERY_ENABLED, false);
        NodeManager nm = new NodeManager();
        nm.init(conf);
        nm.start();
        return nm;
    }

    /** Waits until the RM has every NodeManager RUNNING, and its scheduler knows them all. */
    private void awaitNodes(ResourceManager rm, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (true) {
            int running = 0;
            for (NodeManager nm : nodeManagers) {
                NodeId id = nm.getNMContext().getNodeId();
                RMNode node = id == null ? null : rm.getRMContext().getRMNodes().get(id);
                if (node != null && node.getState() == NodeState.RUNNING) {
                    running++;
                }
            }
            if (running == nodeManagers.size()
                    && rm.getResourceScheduler().getNumClusterNodes() == nodeManagers.size()) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException(
                        running + " of " + nodeManagers.size() + " NodeManagers registered after " + timeoutMs + " ms");
            }
            Thread.sleep(50);
        }
    }

    /**
     * Makes the RM's REST API answer again. Every web app of this JVM (the RM's and each
     * NodeManager's) serves its requests through Guice's static filter pipeline, which the last
     * web app to start has set to its own: /ws/v1/cluster then answers 404. The RM's own
     * GuiceFilter instance holds the RM's pipeline; it is put back as the static one.
     */
    private static void restoreRestApi(ResourceManager rm) throws ReflectiveOperationException {
        Method getWebapp = ResourceManager.class.getDeclaredMethod("getWebapp");
        getWebapp.setAccessible(true);
        WebApp webApp = (WebApp) getWebapp.invoke(rm);
        Field filterField = WebApp.class.getDeclaredField("guiceFilter");
        filterField.setAccessible(true);
        Object filter = filterField.get(webApp);
        Field pipelineField = GuiceFilter.class.getDeclaredField("injectedPipeline");
        pipelineField.setAccessible(true);
        Object pipeline = pipelineField.get(filter);
        Field staticPipeline = GuiceFilter.class.getDeclaredField("pipeline");
        staticPipeline.setAccessible(true);
        staticPipeline.set(null, pipeline);
    }

    /** Answers commands until quit (true) or the end of stdin (false). */
    private boolean serve(BufferedReader in, PrintStream out) throws Exception {
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            if (words[0].isEmpty()) {
                continue;
            }
            ObjectNode answer;
            try {
                answer =
                        switch (words[0]) {
                            case "ask" -> {
                                if (words.length != 2) {
                                    throw new IllegalArgumentException("usage: ask N");
                                }
                                yield appMaster.ask(Integer.parseInt(words[1]));
                            }
                            case "release" -> appMaster.release();
                            case "status" -> appMaster.status();
                            case "restart-rm" -> restartResourceManager();
                            case "new-app" -> newApp();
                            case "quit" -> null;
                            default -> throw new IllegalArgumentException("unknown command: " + words[0]);
                        };
            } catch (Exception e) {
                if (!(e instanceof IllegalArgumentException)) {
                    e.printStackTrace();
                }
                answer = JSON.createObjectNode().put("error", words[0] + ": " + e);
            }
            if (answer == null) {
                return true;
            }
            out.println(answer);
        }
        return false;
    }

    /**
     * Stops the RM and starts a new one on the same ports and store; the NodeManagers re-register
     * with their running containers, and the application master with its application.
     */
    private ObjectNode restartResourceManager() throws Exception {
        long started = System.nanoTime();
        // Static metrics outlive an RM in this JVM: the new one would count on top of the old.
        QueueMetrics.clearQueueMetrics();
        ClusterMetrics.destroy();
        yarn.restartResourceManager(0);
        ResourceManager rm = yarn.getResourceManager();
        // The new RM's web app started last and has the pipeline already; this keeps it so.
        restoreRestApi(rm);
        double restApi = (System.nanoTime() - started) / 1e9;
        awaitNodes(rm, 120_000);
        double nodes = (System.nanoTime() - started) / 1e9;
        ObjectNode answer = JSON.createObjectNode();
        answer.put("restarted", true);
        answer.put("rest_seconds", round(restApi));
        answer.put("nodes_seconds", round(nodes));
        try {
            appMaster.resync();
            answer.put("am", rm.getRMContext().getRMApps().get(appMaster.applicationId())
                    .getCurrentAppAttempt().getAppAttemptState().name());
            answer.put("app", appMaster.applicationId().toString());
        } catch (Exception e) {
            e.printStackTrace();
            answer.put("am", "lost: " + e);
        }
        answer.put("seconds", round((System.nanoTime() - started) / 1e9));
        return answer;
    }

    private ObjectNode newApp() throws Exception {
        appMaster.finish();
        appMaster = AppMaster.start(new YarnConfiguration(resourceManager().getConfig()), appUser, this::resourceManager);
        return JSON.createObjectNode().put("app", appMaster.applicationId().toString());
    }

    private void finish() {
        try {
            appMaster.finish();
        } catch (Exception e) {
            System.err.println("yarn-cluster: finishing the application: " + e);
        }
    }

    static double round(double seconds) {
        return Math.round(seconds * 100) / 100.0;
    }
}
