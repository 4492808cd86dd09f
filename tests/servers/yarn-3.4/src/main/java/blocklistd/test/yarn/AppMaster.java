package blocklistd.test.yarn;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.lang.reflect.UndeclaredThrowableException;
import java.security.PrivilegedExceptionAction;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Supplier;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.protocolrecords.AllocateResponse;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerState;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.YarnApplicationAttemptState;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.NMClient;
import org.apache.hadoop.yarn.client.api.NMTokenCache;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainerState;

/**
 * An unmanaged application master in the harness's JVM, standing for Flink's: an application
 * "flink-test" of type "Apache Flink" whose containers are asked for, launched and released on
 * command. It acts as the application's owner through a UGI of its own, which holds its AMRM
 * token: another application master (new-app) in this JVM does not pick the wrong one, and the
 * token the RM rolls over (after a restart, say) lands there, since the client stores it in the
 * current UGI.
 */
final class AppMaster {
    static final String NAME = "flink-test";
    static final String TYPE = "Apache Flink";
    /** An ask is over once no container came for this long. */
    private static final long QUIET_MS = 3000;
    private static final long HEARTBEAT_MS = 1000;

    private final YarnClient client;
    private final ApplicationId appId;
    private final UserGroupInformation ugi;
    private final AMRMClient<ContainerRequest> amrm;
    private final NMClient nm;
    private final Supplier<ResourceManager> rm;
    /** Guards amrm and what follows: the heartbeat thread and the commands take turns. */
    private final Object lock = new Object();
    private final Map<ContainerId, Container> held = new LinkedHashMap<>();
    private final Deque<ObjectNode> completed = new ArrayDeque<>();
    /** Released by this master: their completion is no news. */
    private final Set<ContainerId> released = new HashSet<>();
    private final Set<ContainerId> reported = new HashSet<>();
    private final Thread heartbeat;
    private volatile boolean finished;

    private AppMaster(
            YarnClient client,
            ApplicationId appId,
            UserGroupInformation ugi,
            AMRMClient<ContainerRequest> amrm,
            NMClient nm,
            Supplier<ResourceManager> rm) {
        this.client = client;
        this.appId = appId;
        this.ugi = ugi;
        this.amrm = amrm;
        this.nm = nm;
        this.rm = rm;
        // Without heartbeats the RM would expire the attempt (after 10 min), and completed
        // containers would go unnoticed between commands.
        heartbeat = new Thread(this::heartbeatLoop, "am-heartbeat-" + appId);
        heartbeat.setDaemon(true);
        heartbeat.start();
    }

    /** Submits an unmanaged application and registers as its master once YARN has launched it. */
    static AppMaster start(Configuration conf, String user, Supplier<ResourceManager> rm) throws Exception {
        // The owner submits (simple authentication: the RPC says who), and holds the AMRM token.
        UserGroupInformation ugi = UserGroupInformation.createRemoteUser(user);
        return doAs(ugi, () -> start(conf, ugi, rm));
    }

    private static AppMaster start(Configuration conf, UserGroupInformation ugi, Supplier<ResourceManager> rm)
            throws Exception {
        YarnClient client = YarnClient.createYarnClient();
        client.init(conf);
        client.start();
        YarnClientApplication app = client.createApplication();
        ApplicationSubmissionContext context = app.getApplicationSubmissionContext();
        ApplicationId appId = context.getApplicationId();
        context.setApplicationName(NAME);
        context.setApplicationType(TYPE);
        context.setQueue("default");
        context.setUnmanagedAM(true);
        context.setMaxAppAttempts(1);
        context.setResource(Resource.newInstance(1024, 1));
        context.setAMContainerSpec(ContainerLaunchContext.newInstance(null, null, null, null, null, null));
        client.submitApplication(context);

        // An unmanaged AM may register only once its attempt is LAUNCHED.
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            ApplicationAttemptId attempt = client.getApplicationReport(appId).getCurrentApplicationAttemptId();
            if (attempt != null
                    && client.getApplicationAttemptReport(attempt).getYarnApplicationAttemptState()
                            == YarnApplicationAttemptState.LAUNCHED) {
                break;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException(appId + " not launched after 60 s: " + client.getApplicationReport(appId));
            }
            Thread.sleep(50);
        }
        Token<AMRMTokenIdentifier> token = client.getAMRMToken(appId);
        ugi.addToken(token);

        NMTokenCache nmTokens = new NMTokenCache();
        AMRMClient<ContainerRequest> amrm = AMRMClient.createAMRMClient();
        amrm.setNMTokenCache(nmTokens);
        amrm.init(conf);
        NMClient nm = NMClient.createNMClient();
        nm.setNMTokenCache(nmTokens);
        nm.init(conf);
        nm.start();
        amrm.start();
        amrm.registerApplicationMaster("127.0.0.1", 0, "");
        return new AppMaster(client, appId, ugi, amrm, nm, rm);
    }

    ApplicationId applicationId() {
        return appId;
    }

    /**
     * Asks for n containers of 1 GiB and 1 vcore anywhere, takes what comes until nothing more has
     * for QUIET_MS, withdraws the rest, and launches what it got.
     */
    ObjectNode ask(int n) throws Exception {
        synchronized (lock) {
            Deque<ContainerRequest> requests = new ArrayDeque<>();
            for (int i = 0; i < n; i++) {
                ContainerRequest request =
                        new ContainerRequest(Resource.newInstance(1024, 1), null, null, Priority.newInstance(1));
                amrm.addContainerRequest(request);
                requests.add(request);
            }
            List<Container> got = new ArrayList<>();
            long last = System.currentTimeMillis();
            while (got.size() < n && System.currentTimeMillis() - last < QUIET_MS) {
                if (take(allocate(), got, n, requests) > 0) {
                    last = System.currentTimeMillis();
                }
                Thread.sleep(100);
            }
            int pending = requests.size();
            // AMRMClient keeps a request until it is removed, and would ask for it again after
            // any later heartbeat or a resync: withdraw what is still outstanding.
            while (!requests.isEmpty()) {
                amrm.removeContainerRequest(requests.poll());
            }
            // The withdrawal reaches the RM with this heartbeat; what it gave meanwhile still
            // counts as long as it was asked for.
            int late = take(allocate(), got, n, requests);
            pending -= late;

            ContainerLaunchContext launch = launchContext();
            for (Container container : got) {
                nm.startContainer(container, launch);
                held.put(container.getId(), container);
            }
            awaitRunning(got, 60_000);

            ObjectNode answer = Cluster.JSON.createObjectNode();
            ObjectNode allocated = answer.putObject("allocated");
            Map<String, Integer> byNode = new TreeMap<>();
            for (Container container : got) {
                byNode.merge(container.getNodeId().toString(), 1, Integer::sum);
            }
            byNode.forEach(allocated::put);
            ArrayNode containers = answer.putArray("containers");
            for (Container container : got) {
                containers.add(describe(container));
            }
            answer.put("pending", pending);
            return answer;
        }
    }

    /** Keeps allocated containers while fewer than n are, one request withdrawn for each. */
    private int take(AllocateResponse response, List<Container> got, int n, Deque<ContainerRequest> requests)
            throws Exception {
        int taken = 0;
        for (Container container : response.getAllocatedContainers()) {
            if (got.size() < n) {
                got.add(container);
                taken++;
                ContainerRequest request = requests.poll();
                if (request != null) {
                    amrm.removeContainerRequest(request);
                }
            } else {
                release(container.getId());
            }
        }
        return taken;
    }

    /**
     * A container that runs until stopped, but no longer than an hour, and ends by itself within
     * 2 s of this JVM's death: a harness killed with SIGKILL leaves no process behind (YARN starts
     * each container in a session of its own, out of reach of the harness's process group). No
     * shell variable: YARN puts the command inside double quotes in its launch script.
     */
    private static ContainerLaunchContext launchContext() {
        long pid = ProcessHandle.current().pid();
        String logs = ApplicationConstants.LOG_DIR_EXPANSION_VAR;
        String command =
                "exec timeout 3600 /bin/sh -c 'while kill -0 "
                        + pid
                        + " 2>/dev/null; do sleep 2; done' 1>"
                        + logs
                        + "/stdout 2>"
                        + logs
                        + "/stderr";
        return ContainerLaunchContext.newInstance(null, null, List.of(command), null, null, null);
    }

    /** Waits until the RM has seen each container running (on the NodeManager's next heartbeat). */
    private void awaitRunning(List<Container> containers, long timeoutMs) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        for (Container container : containers) {
            while (true) {
                String state = rmState(container.getId());
                if (state.equals(RMContainerState.RUNNING.name())) {
                    break;
                }
                if (state.equals(RMContainerState.COMPLETED.name()) || state.equals(RMContainerState.KILLED.name())) {
                    throw new IllegalStateException(container.getId() + " ended before running: " + state);
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(container.getId() + " not running after " + timeoutMs + " ms: " + state);
                }
                Thread.sleep(50);
            }
        }
    }

    private String rmState(ContainerId id) {
        RMContainer container = rm.get().getResourceScheduler().getRMContainer(id);
        return container == null ? "UNKNOWN" : container.getState().name();
    }

    /**
     * Releases every container held (the RM frees them at once), stops it on its node, and answers
     * once the NodeManagers say they are complete: their processes are gone.
     */
    ObjectNode release() throws Exception {
        synchronized (lock) {
            return Cluster.JSON.createObjectNode().put("released", releaseAll());
        }
    }

    private int releaseAll() throws Exception {
        List<Container> containers = new ArrayList<>(held.values());
        for (Container container : containers) {
            release(container.getId());
        }
        allocate();
        for (Container container : containers) {
            try {
                nm.stopContainer(container.getId(), container.getNodeId());
            } catch (Exception e) {
                // Already gone: signalled, or stopped by the NodeManager on the RM's word.
            }
            held.remove(container.getId());
        }
        long deadline = System.currentTimeMillis() + 10_000;
        for (Container container : containers) {
            while (System.currentTimeMillis() < deadline) {
                try {
                    if (nm.getContainerStatus(container.getId(), container.getNodeId()).getState()
                            == ContainerState.COMPLETE) {
                        break;
                    }
                } catch (Exception e) {
                    break; // The NodeManager no longer knows it.
                }
                Thread.sleep(50);
            }
        }
        return containers.size();
    }

    /** The containers held that YARN has not reported complete, and the last completions seen. */
    ObjectNode status() throws Exception {
        synchronized (lock) {
            allocate();
            ObjectNode answer = Cluster.JSON.createObjectNode();
            answer.put("app", appId.toString());
            ObjectNode running = answer.putObject("running");
            Map<String, Integer> byNode = new TreeMap<>();
            for (Container container : held.values()) {
                byNode.merge(container.getNodeId().toString(), 1, Integer::sum);
            }
            byNode.forEach(running::put);
            ArrayNode containers = answer.putArray("containers");
            for (Container container : held.values()) {
                containers.add(describe(container).put("state", rmState(container.getId())));
            }
            ArrayNode done = answer.putArray("completed");
            completed.forEach(done::add);
            return answer;
        }
    }

    /** After an RM restart: a heartbeat, which re-registers the master if the RM asks it to. */
    void resync() throws Exception {
        synchronized (lock) {
            allocate();
        }
    }

    /**
     * Releases and stops every container, then unregisters. (A container that ends while an
     * unmanaged attempt is being saved as finished throws a NullPointerException in the RM's
     * dispatcher: none must be left by then.)
     */
    void finish() throws Exception {
        finished = true;
        heartbeat.interrupt();
        heartbeat.join(5000);
        synchronized (lock) {
            releaseAll();
            nm.stop();
            doAs(
                    ugi,
                    () -> {
                        amrm.unregisterApplicationMaster(FinalApplicationStatus.SUCCEEDED, "", "");
                        amrm.stop();
                        return null;
                    });
            held.clear();
            client.stop();
        }
    }

    private void heartbeatLoop() {
        while (!finished) {
            try {
                Thread.sleep(HEARTBEAT_MS);
                synchronized (lock) {
                    if (!finished) {
                        AllocateResponse response = allocate();
                        // Only asks take containers: anything else goes back.
                        for (Container container : response.getAllocatedContainers()) {
                            release(container.getId());
                        }
                    }
                }
            } catch (InterruptedException e) {
                return;
            } catch (Exception e) {
                System.err.println("yarn-cluster: " + appId + " heartbeat: " + e);
            }
        }
    }

    private void release(ContainerId id) {
        released.add(id);
        amrm.releaseAssignedContainer(id);
    }

    /** A heartbeat as the master's own user, noting the containers YARN reports complete. */
    private AllocateResponse allocate() throws Exception {
        AllocateResponse response = doAs(ugi, () -> amrm.allocate(0.5f));
        for (ContainerStatus status : response.getCompletedContainersStatuses()) {
            // A resync with a restarted RM reports again what was complete before.
            if (released.contains(status.getContainerId()) || !reported.add(status.getContainerId())) {
                continue;
            }
            Container container = held.remove(status.getContainerId());
            ObjectNode entry = Cluster.JSON.createObjectNode();
            entry.put("id", status.getContainerId().toString());
            if (container != null) {
                entry.put("node", container.getNodeId().toString());
            }
            entry.put("exit_status", status.getExitStatus());
            entry.put("diagnostics", status.getDiagnostics());
            entry.put("seen_at_ms", System.currentTimeMillis());
            completed.addLast(entry);
            while (completed.size() > 100) {
                completed.removeFirst();
            }
            System.err.println("yarn-cluster: completed " + entry);
        }
        return response;
    }

    private static ObjectNode describe(Container container) {
        ObjectNode entry = Cluster.JSON.createObjectNode();
        entry.put("id", container.getId().toString());
        entry.put("node", container.getNodeId().toString());
        entry.put("host", container.getNodeId().getHost());
        return entry;
    }

    private static <T> T doAs(UserGroupInformation ugi, PrivilegedExceptionAction<T> action) throws Exception {
        try {
            return ugi.doAs(action);
        } catch (UndeclaredThrowableException e) {
            throw e.getCause() instanceof Exception cause ? cause : e;
        }
    }
}
