package pybroker.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Two classic-protocol consumers of one group, each on its own thread: the second joins once
 * the first has its partitions (a rebalance), both read until every partition's owner is at
 * the end, then both commitSync, then both close. Every record read is compared with what was
 * produced, and no record below the group's starting (committed) offsets may be read.
 */
final class GroupRun {

    static final long RUN_TIMEOUT_MS = 45_000;

    record Result(Map<TopicPartition, Long> committed, Map<TopicPartition, Set<String>> owners, String summary) {
    }

    /** What a member last saw after a poll, published as one immutable object. */
    record Snapshot(Set<TopicPartition> assignment, Map<TopicPartition, Long> positions) {
    }

    private enum Phase { CONSUME, COMMIT, CLOSE }

    private final Checks checks;
    private final String label;
    private final Map<TopicPartition, Long> starts;
    private final Map<TopicPartition, Long> ends;
    private final Consumer<ConsumerGroupDescription> whileStable;
    private final Map<TopicPartition, ConcurrentSkipListSet<Long>> seen = new ConcurrentHashMap<>();
    private final ConcurrentLinkedQueue<String> problems = new ConcurrentLinkedQueue<>();
    private volatile Phase phase = Phase.CONSUME;

    GroupRun(Checks checks, String label, Map<TopicPartition, Long> starts, Map<TopicPartition, Long> ends,
             Consumer<ConsumerGroupDescription> whileStable) {
        this.checks = checks;
        this.label = label;
        this.starts = starts;
        this.ends = ends;
        this.whileStable = whileStable;
        ends.keySet().forEach(tp -> seen.put(tp, new ConcurrentSkipListSet<>()));
    }

    final class Member extends Thread {
        final String clientId;
        volatile Snapshot snapshot = new Snapshot(Set.of(), Map.of());
        final AtomicReference<Throwable> error = new AtomicReference<>();
        final CountDownLatch committedLatch = new CountDownLatch(1);
        volatile Map<TopicPartition, Long> committed;
        volatile long polls;

        Member(String name) {
            super("consumer-" + label + "-" + name);
            setDaemon(true);
            clientId = "jc-" + label + "-" + name + "-" + checks.run;
        }

        @Override
        public void run() {
            KafkaConsumer<byte[], byte[]> consumer = null;
            try {
                consumer = new KafkaConsumer<>(checks.consumerProps(clientId, checks.group),
                    new ByteArrayDeserializer(), new ByteArrayDeserializer());
                consumer.subscribe(List.of(checks.dataTopic));
                while (phase == Phase.CONSUME) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                        if (r.offset() < starts.get(tp)) {
                            problems.add(clientId + " read " + tp + "@" + r.offset() + " below the start " + starts.get(tp));
                        }
                        try {
                            Checks.compare(r, checks.produced.get(r.partition()).get(r.offset()));
                        } catch (AssertionError e) {
                            problems.add(clientId + ": " + e.getMessage());
                        }
                        seen.get(tp).add(r.offset());
                    }
                    polls++;
                    Set<TopicPartition> assignment = new HashSet<>(consumer.assignment());
                    Map<TopicPartition, Long> positions = new HashMap<>();
                    for (TopicPartition tp : assignment) {
                        try {
                            positions.put(tp, consumer.position(tp, Duration.ofSeconds(2)));
                        } catch (RuntimeException e) {
                            // Not known yet (e.g. a rebalance began); the next poll tells.
                        }
                    }
                    snapshot = new Snapshot(assignment, positions);
                }
                consumer.commitSync(Checks.OP_TIMEOUT);
                Map<TopicPartition, Long> mine = new HashMap<>();
                Map<TopicPartition, OffsetAndMetadata> got = consumer.committed(consumer.assignment(), Checks.OP_TIMEOUT);
                got.forEach((tp, om) -> mine.put(tp, om == null ? null : om.offset()));
                committed = mine;
                committedLatch.countDown();
                long deadline = System.currentTimeMillis() + RUN_TIMEOUT_MS;
                while (phase != Phase.CLOSE && System.currentTimeMillis() < deadline) {
                    Thread.sleep(20); // the heartbeat thread keeps the membership meanwhile
                }
            } catch (Throwable t) {
                error.compareAndSet(null, t);
            } finally {
                committedLatch.countDown();
                if (consumer != null) {
                    try {
                        consumer.close(Duration.ofSeconds(10));
                    } catch (Throwable t) {
                        error.compareAndSet(null, t);
                    }
                }
            }
        }
    }

    Result run() throws Exception {
        long started = System.currentTimeMillis();
        long deadline = started + RUN_TIMEOUT_MS;
        Member a = new Member("a");
        Member b = new Member("b");
        List<Member> members = List.of(a, b);
        try {
            a.start();
            // The second member joins once the first owns partitions: a real rebalance.
            while (a.snapshot.assignment().isEmpty()) {
                failIfBroken(members);
                Checks.check(System.currentTimeMillis() < deadline,
                    "first member got no partitions in " + RUN_TIMEOUT_MS + " ms (" + a.polls + " polls)");
                Thread.sleep(50);
            }
            long firstAssigned = System.currentTimeMillis() - started;
            b.start();
            long secondJoined = System.currentTimeMillis();
            while (!done(a, b)) {
                failIfBroken(members);
                Checks.check(System.currentTimeMillis() < deadline,
                    "group not done after " + RUN_TIMEOUT_MS + " ms: " + state(a, b));
                Thread.sleep(50);
            }
            long rebalanced = System.currentTimeMillis() - secondJoined;
            if (whileStable != null) {
                whileStable.accept(Checks.get(checks.admin().describeConsumerGroups(List.of(checks.group)).all()).get(checks.group));
            }
            phase = Phase.COMMIT;
            for (Member m : members) {
                Checks.check(m.committedLatch.await(Checks.OP_TIMEOUT_MS, TimeUnit.MILLISECONDS), m.clientId + ": commitSync did not return");
            }
            failIfBroken(members);
            Map<TopicPartition, Set<String>> owners = new HashMap<>();
            for (Member m : members) {
                m.snapshot.assignment().forEach(tp -> owners.computeIfAbsent(tp, k -> new HashSet<>()).add(m.clientId));
            }
            phase = Phase.CLOSE;
            for (Member m : members) {
                m.join(15_000);
                Checks.check(!m.isAlive(), m.clientId + ": close did not return in 15 s");
            }
            failIfBroken(members);
            Checks.check(problems.isEmpty(), problems.size() + " problems, first: " + problems.peek());
            for (TopicPartition tp : ends.keySet()) {
                Set<Long> want = new TreeSet<>();
                for (long o = starts.get(tp); o < ends.get(tp); o++) {
                    want.add(o);
                }
                Checks.check(seen.get(tp).equals(want), tp + ": read offsets " + seen.get(tp) + ", expected " + starts.get(tp) + ".." + (ends.get(tp) - 1));
            }
            Map<TopicPartition, Long> committed = new HashMap<>();
            for (Member m : members) {
                committed.putAll(m.committed);
            }
            int records = seen.values().stream().mapToInt(Set::size).sum();
            String summary = "2 members " + partitions(a) + " " + partitions(b) + ", " + records
                + " records from " + new TreeMap<>(byPartition(starts)) + ", first assignment after " + firstAssigned
                + " ms, rebalanced and caught up " + rebalanced + " ms after the second joined";
            return new Result(committed, owners, summary);
        } finally {
            phase = Phase.CLOSE;
            for (Member m : members) {
                if (m.isAlive()) {
                    m.join(15_000);
                }
            }
        }
    }

    private static Map<Integer, Long> byPartition(Map<TopicPartition, Long> m) {
        Map<Integer, Long> out = new HashMap<>();
        m.forEach((tp, v) -> out.put(tp.partition(), v));
        return out;
    }

    private static String partitions(Member m) {
        List<Integer> ps = new ArrayList<>();
        m.snapshot.assignment().forEach(tp -> ps.add(tp.partition()));
        ps.sort(null);
        return ps.toString();
    }

    private void failIfBroken(List<Member> members) {
        for (Member m : members) {
            Throwable t = m.error.get();
            if (t != null) {
                throw new AssertionError(m.clientId + " failed: " + JavaClientChecks.describe(t), t);
            }
            Checks.check(m.getState() == Thread.State.NEW || m.isAlive() || phase != Phase.CONSUME, m.clientId + " stopped");
        }
    }

    /** Both own partitions, disjointly, all of them, each owner at the end, every record seen. */
    private boolean done(Member a, Member b) {
        Snapshot sa = a.snapshot;
        Snapshot sb = b.snapshot;
        if (sa.assignment().isEmpty() || sb.assignment().isEmpty()) {
            return false;
        }
        Set<TopicPartition> union = new HashSet<>(sa.assignment());
        union.addAll(sb.assignment());
        if (union.size() != sa.assignment().size() + sb.assignment().size() || !union.equals(ends.keySet())) {
            return false;
        }
        for (TopicPartition tp : ends.keySet()) {
            Snapshot owner = sa.assignment().contains(tp) ? sa : sb;
            if (!ends.get(tp).equals(owner.positions().get(tp))) {
                return false;
            }
            if (seen.get(tp).size() < ends.get(tp) - starts.get(tp)) {
                return false;
            }
        }
        return true;
    }

    private String state(Member a, Member b) {
        StringBuilder out = new StringBuilder();
        for (Member m : List.of(a, b)) {
            out.append(m.clientId).append(" assigned ").append(m.snapshot.assignment())
                .append(" positions ").append(m.snapshot.positions()).append(" polls ").append(m.polls).append("; ");
        }
        Map<Integer, Integer> counts = new TreeMap<>();
        seen.forEach((tp, s) -> counts.put(tp.partition(), s.size()));
        out.append("records seen per partition ").append(counts).append(", ends ").append(new TreeMap<>(byPartition(ends)));
        return out.toString();
    }
}
