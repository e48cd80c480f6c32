// The checks of the Java client against one broker, one method each.
// Longer than ~700 lines on purpose: the checks share this file's small helpers
// (clients with bounded timeouts, topic cleanup, produce-and-read-back) and read
// best side by side; each method stands alone.
package pybroker.compat;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ConsumerGroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** The checks and the state they share. Every wait is bounded. */
@SuppressWarnings("deprecation") // ConsumerGroupState and listConsumerGroups: deprecated in 4.x, kept so one source builds with 3.9 and 4.x
final class Checks implements AutoCloseable {

    static final int PARTITIONS = 3;
    static final long OP_TIMEOUT_MS = 20_000;
    static final Duration OP_TIMEOUT = Duration.ofMillis(OP_TIMEOUT_MS);
    static final int RECORDS_PER_CODEC = 30; // 10 per partition
    static final int RESUME_RECORDS_PER_PARTITION = 3;
    static final int PIPELINED_RECORDS = 20_000;
    static final List<String> CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");

    interface Check {
        String run() throws Exception;
    }

    record Named(String name, boolean setup, Check check) {
    }

    /** A check that is not run, with the reason (not a failure). */
    static final class Skip extends Exception {
        private static final long serialVersionUID = 1L;

        Skip(String reason) {
            super(reason);
        }
    }

    /** What a produced record should look like when read back. */
    record Expected(byte[] key, byte[] value, List<Header> headers, long timestamp) {
    }

    final String bootstrap;
    final String run = UUID.randomUUID().toString().substring(0, 8);
    final String adminTopic = "jc-admin-" + run;
    final String dataTopic = "jc-data-" + run;
    final String group = "jc-group-" + run;
    private volatile String current;
    private Admin admin;
    private Uuid adminTopicId;
    final Set<String> created = new HashSet<>();
    /** partition -> offset -> record, for every record acknowledged so far. */
    final Map<Integer, TreeMap<Long, Expected>> produced = new HashMap<>();
    private final long timestampBase = System.currentTimeMillis() - 60_000;
    private long timestampSeq = 0;
    /** Per partition, the last sequence number of each producer whose every record was acknowledged. */
    private final Map<Integer, List<Integer>> lastSequences = new HashMap<>();
    /** Committed offsets after the first group run, then after the resume run. */
    private Map<TopicPartition, Long> committedAfterFirstRun;
    private Map<TopicPartition, Long> committedAfterResume;
    private ConsumerGroupDescription describedWhileActive;
    private Map<TopicPartition, Set<String>> activeAssignment;

    Checks(String bootstrap) {
        this.bootstrap = bootstrap;
    }

    List<Named> all() {
        List<Named> checks = new ArrayList<>();
        checks.add(new Named("admin.createTopics", true, this::createTopics));
        checks.add(new Named("admin.describeTopics", false, this::describeTopics));
        checks.add(new Named("admin.describeTopicsById", false, this::describeTopicsById));
        checks.add(new Named("admin.describeCluster", false, this::describeCluster));
        checks.add(new Named("admin.describeConfigs", false, this::describeConfigs));
        checks.add(new Named("admin.incrementalAlterConfigs", false, this::incrementalAlterConfigs));
        checks.add(new Named("admin.listTopics", false, this::listTopics));
        for (String codec : CODECS) {
            checks.add(new Named("produce." + codec, codec.equals("none"), () -> produce(codec)));
        }
        checks.add(new Named("produce.pipelined", false, this::producePipelined));
        checks.add(new Named("produce.idempotentState", false, this::idempotentState));
        checks.add(new Named("produce.transactional", false, this::transactional));
        checks.add(new Named("produce.transactionsV2", false, () -> TransactionsV2.check(this)));
        checks.add(new Named("consumer.group", false, this::consumerGroup));
        checks.add(new Named("consumer.resume", false, this::consumerResume));
        checks.add(new Named("consumer.offsetsForTimes", false, this::offsetsForTimes));
        checks.add(new Named("consumer.beginningEndOffsets", false, this::beginningEndOffsets));
        checks.add(new Named("groups.list", false, this::listGroups));
        checks.add(new Named("groups.describe", false, this::describeGroups));
        checks.add(new Named("groups.listOffsets", false, this::listGroupOffsets));
        checks.add(new Named("groups.delete", false, this::deleteGroups));
        checks.add(new Named("admin.deleteTopics", false, this::deleteTopics));
        return checks;
    }

    boolean neededBy(Named setup, Set<String> selected) {
        return !selected.isEmpty();
    }

    String current() {
        return current;
    }

    void setCurrent(String name) {
        current = name;
    }

    // ------------------------------------------------------------------ clients

    Admin admin() {
        if (admin == null) {
            Properties p = new Properties();
            p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(AdminClientConfig.CLIENT_ID_CONFIG, "jc-admin-" + run);
            p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
            p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(OP_TIMEOUT_MS));
            admin = Admin.create(p);
        }
        return admin;
    }

    KafkaProducer<byte[], byte[]> producer(String codec) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "jc-producer-" + codec + "-" + run);
        // The Java defaults, spelled out: acks=all, idempotent.
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    Properties consumerProps(String clientId, String groupId) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(OP_TIMEOUT_MS));
        if (groupId != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
            p.put("group.protocol", "classic");
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
            p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        }
        return p;
    }

    KafkaConsumer<byte[], byte[]> plainConsumer(String name) {
        return new KafkaConsumer<>(consumerProps("jc-" + name + "-" + run, null),
            new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static <T> T get(Future<T> future) throws Exception {
        return future.get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
    }

    static void check(boolean ok, String message) {
        if (!ok) {
            throw new AssertionError(message);
        }
    }

    List<TopicPartition> dataPartitions() {
        List<TopicPartition> out = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            out.add(new TopicPartition(dataTopic, p));
        }
        return out;
    }

    Map<TopicPartition, Long> producedEnds() {
        Map<TopicPartition, Long> ends = new HashMap<>();
        for (TopicPartition tp : dataPartitions()) {
            TreeMap<Long, Expected> records = produced.get(tp.partition());
            ends.put(tp, records == null || records.isEmpty() ? 0L : records.lastKey() + 1);
        }
        return ends;
    }

    int producedCount() {
        return produced.values().stream().mapToInt(Map::size).sum();
    }

    // ------------------------------------------------------------------ admin

    String createTopics() throws Exception {
        NewTopic adminNew = new NewTopic(adminTopic, PARTITIONS, (short) 1)
            .configs(Map.of("retention.ms", "3600000"));
        NewTopic dataNew = new NewTopic(dataTopic, PARTITIONS, (short) 1);
        CreateTopicsResult result = admin().createTopics(List.of(adminNew, dataNew));
        try {
            get(result.all());
        } finally {
            // Whatever came of it, try to delete both at the end.
            created.add(adminTopic);
            created.add(dataTopic);
        }
        check(get(result.numPartitions(adminTopic)) == PARTITIONS, "numPartitions " + get(result.numPartitions(adminTopic)));
        check(get(result.replicationFactor(adminTopic)) == 1, "replicationFactor " + get(result.replicationFactor(adminTopic)));
        adminTopicId = get(result.topicId(adminTopic));
        check(adminTopicId != null && !Uuid.ZERO_UUID.equals(adminTopicId), "topicId " + adminTopicId);
        Config config = get(result.config(adminTopic));
        ConfigEntry retention = config == null ? null : config.get("retention.ms");
        check(retention != null && "3600000".equals(retention.value()),
            "CreateTopics response config retention.ms=" + (retention == null ? null : retention.value()));
        return "2 topics, 3 partitions each, topic id " + adminTopicId;
    }

    String describeTopics() throws Exception {
        Collection<Node> nodes = get(admin().describeCluster().nodes());
        Set<Integer> nodeIds = nodes.stream().map(Node::id).collect(Collectors.toSet());
        Map<String, TopicDescription> byName = get(admin().describeTopics(List.of(adminTopic, dataTopic)).allTopicNames());
        for (String topic : List.of(adminTopic, dataTopic)) {
            TopicDescription d = byName.get(topic);
            check(d != null, "no description of " + topic);
            check(!d.isInternal(), topic + " described as internal");
            check(d.partitions().size() == PARTITIONS, topic + ": " + d.partitions().size() + " partitions");
            for (int i = 0; i < PARTITIONS; i++) {
                TopicPartitionInfo info = d.partitions().get(i);
                check(info.partition() == i, topic + ": partition list out of order: " + d.partitions());
                check(info.leader() != null && nodeIds.contains(info.leader().id()),
                    topic + "-" + i + " leader " + info.leader() + " not among " + nodeIds);
                check(info.replicas().size() == 1 && info.isr().size() == 1,
                    topic + "-" + i + " replicas " + info.replicas() + " isr " + info.isr());
            }
        }
        check(adminTopicId.equals(byName.get(adminTopic).topicId()),
            "topic id " + byName.get(adminTopic).topicId() + " != created " + adminTopicId);
        return "by name: 2 topics, leaders, replicas, ISR, topic id";
    }

    String describeTopicsById() throws Exception {
        check(adminTopicId != null, "no topic id (admin.createTopics failed)");
        Map<Uuid, TopicDescription> byId = get(admin().describeTopics(TopicCollection.ofTopicIds(List.of(adminTopicId))).allTopicIds());
        check(byId.containsKey(adminTopicId) && adminTopic.equals(byId.get(adminTopicId).name()),
            "by id: " + byId);
        check(byId.get(adminTopicId).partitions().size() == PARTITIONS, "by id: " + byId);
        return "by topic id";
    }

    String describeCluster() throws Exception {
        DescribeClusterResult r = admin().describeCluster();
        Collection<Node> nodes = get(r.nodes());
        String clusterId = get(r.clusterId());
        Node controller = get(r.controller());
        check(!nodes.isEmpty(), "no nodes");
        check(clusterId != null && !clusterId.isEmpty(), "cluster id " + clusterId);
        check(controller != null && !controller.isEmpty(), "controller " + controller);
        String port = bootstrap.substring(bootstrap.lastIndexOf(':') + 1);
        check(nodes.stream().anyMatch(n -> String.valueOf(n.port()).equals(port)),
            "no node on the bootstrap port: " + nodes);
        return nodes.size() + " node(s) " + nodes + ", cluster " + clusterId + ", controller " + controller.id();
    }

    Map<String, ConfigEntry> topicConfig(String topic) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config config = get(admin().describeConfigs(List.of(res)).all()).get(res);
        Map<String, ConfigEntry> out = new HashMap<>();
        for (ConfigEntry e : config.entries()) {
            out.put(e.name(), e);
        }
        return out;
    }

    String describeConfigs() throws Exception {
        Map<String, ConfigEntry> config = topicConfig(adminTopic);
        ConfigEntry retention = config.get("retention.ms");
        check(retention != null, "no retention.ms among " + config.keySet());
        check("3600000".equals(retention.value()), "retention.ms=" + retention.value());
        check(retention.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, "retention.ms source " + retention.source());
        ConfigEntry cleanup = config.get("cleanup.policy");
        check(cleanup != null && "delete".equals(cleanup.value()), "cleanup.policy " + cleanup);
        check(cleanup.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, "cleanup.policy source " + cleanup.source());
        // Broker configs too (the node the admin client picks).
        Node node = get(admin().describeCluster().nodes()).iterator().next();
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(node.id()));
        Config brokerConfig = get(admin().describeConfigs(List.of(broker)).all()).get(broker);
        check(brokerConfig.get("num.partitions") != null, "broker " + node.id() + " config has no num.partitions");
        return config.size() + " topic configs, " + brokerConfig.entries().size() + " broker configs";
    }

    String incrementalAlterConfigs() throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, adminTopic);
        // validateOnly changes nothing.
        get(admin().incrementalAlterConfigs(
            Map.of(res, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "1000"), AlterConfigOp.OpType.SET))),
            new AlterConfigsOptions().validateOnly(true)).all());
        check("3600000".equals(topicConfig(adminTopic).get("retention.ms").value()), "validateOnly changed retention.ms");
        // SET two, then DELETE one.
        get(admin().incrementalAlterConfigs(Map.of(res, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("max.message.bytes", "524288"), AlterConfigOp.OpType.SET)))).all());
        Map<String, ConfigEntry> after = topicConfig(adminTopic);
        check("7200000".equals(after.get("retention.ms").value()), "after SET retention.ms=" + after.get("retention.ms").value());
        check("524288".equals(after.get("max.message.bytes").value()), "after SET max.message.bytes=" + after.get("max.message.bytes").value());
        check(after.get("max.message.bytes").source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
            "max.message.bytes source " + after.get("max.message.bytes").source());
        get(admin().incrementalAlterConfigs(Map.of(res, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all());
        ConfigEntry retention = topicConfig(adminTopic).get("retention.ms");
        check(retention.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG && "604800000".equals(retention.value()),
            "after DELETE retention.ms=" + retention.value() + " source " + retention.source());
        // An unknown key is refused with InvalidConfigurationException, as by Kafka.
        try {
            get(admin().incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all());
            throw new AssertionError("SET no.such.config accepted");
        } catch (ExecutionException e) {
            check(e.getCause() instanceof org.apache.kafka.common.errors.InvalidConfigurationException,
                "unknown key: " + JavaClientChecks.describe(e));
        }
        return "validateOnly, SET, DELETE, unknown key refused";
    }

    String listTopics() throws Exception {
        Set<String> names = get(admin().listTopics().names());
        check(names.contains(adminTopic) && names.contains(dataTopic), "missing our topics: " + names);
        check(names.stream().noneMatch(n -> n.startsWith("__")), "internal topics listed without listInternal: " + names);
        return names.size() + " topics";
    }

    String deleteTopics() throws Exception {
        get(admin().deleteTopics(List.of(adminTopic, dataTopic)).all());
        long deadline = System.currentTimeMillis() + 15_000;
        Set<String> names;
        do {
            names = get(admin().listTopics().names());
            if (!names.contains(adminTopic) && !names.contains(dataTopic)) {
                break;
            }
            Thread.sleep(200);
        } while (System.currentTimeMillis() < deadline);
        check(!names.contains(adminTopic) && !names.contains(dataTopic), "still listed 15 s after deletion: " + names);
        created.clear();
        try {
            get(admin().describeTopics(List.of(dataTopic)).allTopicNames());
            throw new AssertionError("deleted topic still described");
        } catch (ExecutionException e) {
            check(e.getCause() instanceof UnknownTopicOrPartitionException, "describe after delete: " + JavaClientChecks.describe(e));
        }
        return "gone from listTopics, describe says UnknownTopicOrPartition";
    }

    // ------------------------------------------------------------------ produce

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    String produce(String codec) throws Exception {
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        List<Expected> sent = new ArrayList<>();
        Map<TopicPartition, Long> first = new HashMap<>();
        Map<TopicPartition, Long> end = new HashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(codec)) {
            for (int i = 0; i < RECORDS_PER_CODEC; i++) {
                int partition = i % PARTITIONS;
                long ts = timestampBase + timestampSeq++;
                byte[] key = bytes("key-" + codec + "-" + i);
                byte[] value = bytes(("value " + codec + " " + i + " ").repeat(20));
                List<Header> headers = List.of(
                    new RecordHeader("codec", bytes(codec)),
                    new RecordHeader("seq", ByteBuffer.allocate(4).putInt(i).array()),
                    new RecordHeader("empty", null));
                futures.add(producer.send(new ProducerRecord<>(dataTopic, partition, ts, key, value, headers)));
                sent.add(new Expected(key, value, headers, ts));
            }
            producer.flush();
            Map<Integer, List<Long>> offsets = new TreeMap<>();
            for (int i = 0; i < futures.size(); i++) {
                RecordMetadata md = get(futures.get(i));
                check(md.partition() == i % PARTITIONS, "record " + i + " went to partition " + md.partition());
                check(md.timestamp() == sent.get(i).timestamp(), "record " + i + " timestamp " + md.timestamp());
                offsets.computeIfAbsent(md.partition(), k -> new ArrayList<>()).add(md.offset());
                produced.computeIfAbsent(md.partition(), k -> new TreeMap<>()).put(md.offset(), sent.get(i));
            }
            for (Map.Entry<Integer, List<Long>> e : offsets.entrySet()) {
                List<Long> o = e.getValue();
                for (int j = 1; j < o.size(); j++) {
                    check(o.get(j) == o.get(j - 1) + 1, "partition " + e.getKey() + " offsets not contiguous: " + o);
                }
                first.put(new TopicPartition(dataTopic, e.getKey()), o.get(0));
                end.put(new TopicPartition(dataTopic, e.getKey()), o.get(o.size() - 1) + 1);
                lastSequences.computeIfAbsent(e.getKey(), k -> new ArrayList<>()).add(o.size() - 1);
            }
        }
        // Read back exactly what this producer wrote.
        int read = readBack("readback-" + codec, first, end);
        return RECORDS_PER_CODEC + " records acknowledged and read back (" + read + " checked)";
    }

    /**
     * Many records as fast as the producer sends them: several batches per request and up to
     * five requests in flight per connection (the defaults), so the idempotent sequence checks
     * see pipelined batches.
     */
    String producePipelined() throws Exception {
        List<Future<RecordMetadata>> futures = new ArrayList<>(PIPELINED_RECORDS);
        List<Expected> sent = new ArrayList<>(PIPELINED_RECORDS);
        Map<TopicPartition, Long> first = new HashMap<>();
        Map<TopicPartition, Long> end = new HashMap<>();
        long started = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = producer("lz4")) {
            for (int i = 0; i < PIPELINED_RECORDS; i++) {
                long ts = timestampBase + timestampSeq++;
                Expected e = new Expected(bytes("bulk-" + i), bytes(String.format("bulk value %08d ", i).repeat(5)), List.of(), ts);
                futures.add(producer.send(new ProducerRecord<>(dataTopic, i % PARTITIONS, ts, e.key(), e.value())));
                sent.add(e);
            }
            producer.flush();
            Map<Integer, Long> last = new HashMap<>();
            for (int i = 0; i < futures.size(); i++) {
                RecordMetadata md = get(futures.get(i));
                Long prev = last.put(md.partition(), md.offset());
                check(prev == null || md.offset() == prev + 1,
                    "partition " + md.partition() + ": record " + i + " at offset " + md.offset() + " after " + prev);
                produced.computeIfAbsent(md.partition(), k -> new TreeMap<>()).put(md.offset(), sent.get(i));
                TopicPartition tp = new TopicPartition(dataTopic, md.partition());
                first.putIfAbsent(tp, md.offset());
                end.put(tp, md.offset() + 1);
            }
            first.forEach((tp, off) -> lastSequences.computeIfAbsent(tp.partition(), k -> new ArrayList<>())
                .add((int) (end.get(tp) - off - 1)));
        }
        long ms = (System.nanoTime() - started) / 1_000_000;
        int read = readBack("readback-bulk", first, end);
        return PIPELINED_RECORDS + " records (lz4) acknowledged in " + ms + " ms, offsets contiguous, read back " + read;
    }

    /** Reads [first, end) of each partition with an assigned consumer and compares with {@link #produced}. */
    int readBack(String name, Map<TopicPartition, Long> first, Map<TopicPartition, Long> end) throws Exception {
        int checked = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = plainConsumer(name)) {
            consumer.assign(first.keySet());
            first.forEach(consumer::seek);
            Map<TopicPartition, Long> next = new HashMap<>(first);
            long deadline = System.currentTimeMillis() + OP_TIMEOUT_MS;
            while (next.entrySet().stream().anyMatch(e -> e.getValue() < end.get(e.getKey()))) {
                check(System.currentTimeMillis() < deadline, "read back stopped at " + next + ", expected up to " + end);
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() >= end.get(tp)) {
                        continue;
                    }
                    check(r.offset() == next.get(tp), tp + ": got offset " + r.offset() + ", expected " + next.get(tp));
                    compare(r, produced.get(r.partition()).get(r.offset()));
                    next.put(tp, r.offset() + 1);
                    checked++;
                }
            }
        }
        return checked;
    }

    static void compare(ConsumerRecord<byte[], byte[]> r, Expected e) {
        String where = r.topic() + "-" + r.partition() + "@" + r.offset();
        check(e != null, where + ": not a record this program produced");
        check(Arrays.equals(r.key(), e.key()), where + ": key differs");
        check(Arrays.equals(r.value(), e.value()), where + ": value differs");
        check(r.timestamp() == e.timestamp() && r.timestampType() == TimestampType.CREATE_TIME,
            where + ": timestamp " + r.timestamp() + " " + r.timestampType() + ", expected " + e.timestamp() + " CreateTime");
        Header[] got = r.headers().toArray();
        check(got.length == e.headers().size(), where + ": " + got.length + " headers, expected " + e.headers().size());
        for (int i = 0; i < got.length; i++) {
            Header want = e.headers().get(i);
            check(got[i].key().equals(want.key()) && Arrays.equals(got[i].value(), want.value()),
                where + ": header " + i + " " + got[i].key() + "=" + Arrays.toString(got[i].value())
                    + ", expected " + want.key() + "=" + Arrays.toString(want.value()));
        }
    }

    String idempotentState() throws Exception {
        DescribeProducersResult r = admin().describeProducers(dataPartitions());
        Map<TopicPartition, DescribeProducersResult.PartitionProducerState> all = get(r.all());
        int producers = 0;
        for (TopicPartition tp : dataPartitions()) {
            List<ProducerState> states = all.get(tp).activeProducers();
            producers = Math.max(producers, states.size());
            List<Integer> want = new ArrayList<>(lastSequences.getOrDefault(tp.partition(), List.of()));
            List<Integer> got = new ArrayList<>();
            for (ProducerState s : states) {
                check(s.producerId() >= 0, tp + ": producer id " + s.producerId());
                check(s.currentTransactionStartOffset().isEmpty(), tp + ": open transaction " + s);
                got.add(s.lastSequence());
            }
            want.sort(null);
            got.sort(null);
            check(got.equals(want), tp + ": last sequences of the active producers " + got + ", expected " + want + ": " + states);
        }
        return producers + " idempotent producers per partition, last sequences as sent";
    }

    // ------------------------------------------------------------------ transactions

    /** A transactional producer commits (with a group's offsets), aborts and commits again;
     *  read_committed sees only the committed records, read_uncommitted all of them. */
    String transactional() throws Exception {
        String topic = "jc-txn-" + run;
        get(admin().createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        created.add(topic);
        TopicPartition tp = new TopicPartition(topic, 0);
        String txnGroup = "jc-txn-group-" + run;
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "jc-txn-" + run);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "jc-txn-" + run);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        List<String> expected = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                get(producer.send(new ProducerRecord<>(topic, 0, bytes("k" + i), bytes("committed-" + i))));
                expected.add("committed-" + i);
            }
            producer.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(3)), new ConsumerGroupMetadata(txnGroup));
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 2; i++) {
                get(producer.send(new ProducerRecord<>(topic, 0, bytes("a" + i), bytes("aborted-" + i))));
            }
            producer.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(5)), new ConsumerGroupMetadata(txnGroup));
            producer.abortTransaction();
            producer.beginTransaction();
            get(producer.send(new ProducerRecord<>(topic, 0, bytes("k3"), bytes("committed-3"))));
            expected.add("committed-3");
            producer.commitTransaction();
        }
        List<String> committed = readValues(tp, "read_committed", 4);
        check(committed.equals(expected), "read_committed read " + committed + ", expected " + expected);
        List<String> all = readValues(tp, "read_uncommitted", 6);
        check(all.size() == 6 && all.containsAll(List.of("aborted-0", "aborted-1")), "read_uncommitted read " + all);
        Map<TopicPartition, OffsetAndMetadata> offsets =
            get(admin().listConsumerGroupOffsets(txnGroup).partitionsToOffsetAndMetadata());
        check(offsets.get(tp) != null && offsets.get(tp).offset() == 3, "group offsets " + offsets + ", expected 3 (the aborted 5 dropped)");
        for (ProducerState s : get(admin().describeProducers(List.of(tp)).all()).get(tp).activeProducers()) {
            check(s.currentTransactionStartOffset().isEmpty(), "an open transaction is left: " + s);
        }
        return "commit, abort, commit: read_committed " + committed.size() + " of " + all.size() + " records";
    }

    List<String> readValues(TopicPartition tp, String isolationLevel, int expected) {
        Properties p = consumerProps("jc-txn-reader-" + isolationLevel + "-" + run, null);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolationLevel);
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + OP_TIMEOUT_MS;
            while (values.size() < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    values.add(new String(r.value(), StandardCharsets.UTF_8));
                }
            }
            // A little longer, for records that should not be there.
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                values.add(new String(r.value(), StandardCharsets.UTF_8));
            }
        }
        return values;
    }

    // ------------------------------------------------------------------ consumer group

    String consumerGroup() throws Exception {
        check(producedCount() > 0, "nothing was produced (produce checks failed)");
        Map<TopicPartition, Long> ends = producedEnds();
        Map<TopicPartition, Long> starts = new HashMap<>();
        ends.keySet().forEach(tp -> starts.put(tp, 0L));
        GroupRun groupRun = new GroupRun(this, "first", starts, ends, null);
        GroupRun.Result result = groupRun.run();
        committedAfterFirstRun = result.committed();
        check(committedAfterFirstRun.equals(ends), "committed " + committedAfterFirstRun + ", expected " + ends);
        return result.summary();
    }

    String consumerResume() throws Exception {
        check(committedAfterFirstRun != null, "no committed offsets from consumer.group");
        // More records, then the group restarts: it must start at the committed offsets.
        try (KafkaProducer<byte[], byte[]> producer = producer("none")) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            List<Expected> sent = new ArrayList<>();
            for (int i = 0; i < RESUME_RECORDS_PER_PARTITION * PARTITIONS; i++) {
                long ts = timestampBase + timestampSeq++;
                Expected e = new Expected(bytes("resume-" + i), bytes("resume value " + i), List.of(), ts);
                futures.add(producer.send(new ProducerRecord<>(dataTopic, i % PARTITIONS, ts, e.key(), e.value())));
                sent.add(e);
            }
            producer.flush();
            for (int i = 0; i < futures.size(); i++) {
                RecordMetadata md = get(futures.get(i));
                produced.computeIfAbsent(md.partition(), k -> new TreeMap<>()).put(md.offset(), sent.get(i));
            }
        }
        Map<TopicPartition, Long> ends = producedEnds();
        GroupRun groupRun = new GroupRun(this, "resume", committedAfterFirstRun, ends, description -> {
            describedWhileActive = description;
        });
        GroupRun.Result result = groupRun.run();
        activeAssignment = result.owners();
        committedAfterResume = result.committed();
        check(committedAfterResume.equals(ends), "committed " + committedAfterResume + ", expected " + ends);
        return result.summary();
    }

    String offsetsForTimes() throws Exception {
        check(producedCount() > 0, "nothing was produced");
        try (KafkaConsumer<byte[], byte[]> consumer = plainConsumer("times")) {
            Map<TopicPartition, Long> query = new HashMap<>();
            Map<TopicPartition, Long> want = new HashMap<>();
            for (TopicPartition tp : dataPartitions()) {
                TreeMap<Long, Expected> records = produced.get(tp.partition());
                List<Long> offs = new ArrayList<>(records.keySet());
                long middle = offs.get(offs.size() / 2);
                query.put(tp, records.get(middle).timestamp());
                want.put(tp, middle);
            }
            Map<TopicPartition, OffsetAndTimestamp> got = consumer.offsetsForTimes(query, OP_TIMEOUT);
            for (TopicPartition tp : dataPartitions()) {
                OffsetAndTimestamp ot = got.get(tp);
                check(ot != null && ot.offset() == want.get(tp) && ot.timestamp() == query.get(tp),
                    tp + ": offsetsForTimes(" + query.get(tp) + ") = " + ot + ", expected offset " + want.get(tp));
            }
            // Before every record: the first offset; after every record: null.
            Map<TopicPartition, Long> early = new HashMap<>();
            Map<TopicPartition, Long> late = new HashMap<>();
            for (TopicPartition tp : dataPartitions()) {
                early.put(tp, timestampBase - 1000);
                late.put(tp, System.currentTimeMillis() + 3_600_000);
            }
            Map<TopicPartition, OffsetAndTimestamp> gotEarly = consumer.offsetsForTimes(early, OP_TIMEOUT);
            Map<TopicPartition, OffsetAndTimestamp> gotLate = consumer.offsetsForTimes(late, OP_TIMEOUT);
            for (TopicPartition tp : dataPartitions()) {
                check(gotEarly.get(tp) != null && gotEarly.get(tp).offset() == 0, tp + ": early timestamp -> " + gotEarly.get(tp));
                check(gotLate.get(tp) == null, tp + ": timestamp after every record -> " + gotLate.get(tp));
            }
        }
        return "middle, before-all and after-all timestamps on " + PARTITIONS + " partitions";
    }

    String beginningEndOffsets() throws Exception {
        check(producedCount() > 0, "nothing was produced");
        try (KafkaConsumer<byte[], byte[]> consumer = plainConsumer("offsets")) {
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(dataPartitions(), OP_TIMEOUT);
            Map<TopicPartition, Long> end = consumer.endOffsets(dataPartitions(), OP_TIMEOUT);
            Map<TopicPartition, Long> wantBegin = new HashMap<>();
            dataPartitions().forEach(tp -> wantBegin.put(tp, 0L));
            check(begin.equals(wantBegin), "beginningOffsets " + begin);
            check(end.equals(producedEnds()), "endOffsets " + end + ", expected " + producedEnds());
            return "end offsets " + new TreeMap<>(end.entrySet().stream()
                .collect(Collectors.toMap(e -> e.getKey().partition(), Map.Entry::getValue)));
        }
    }

    // ------------------------------------------------------------------ group admin

    String listGroups() throws Exception {
        check(committedAfterFirstRun != null, "the group never ran (consumer.group failed)");
        Collection<ConsumerGroupListing> groups = get(admin().listConsumerGroups().all());
        ConsumerGroupListing ours = groups.stream().filter(g -> g.groupId().equals(group)).findFirst().orElse(null);
        check(ours != null, group + " not listed: " + groups);
        check(!ours.isSimpleConsumerGroup(), "listed as a simple group: " + ours);
        check(ours.state().isPresent() && ours.state().get() == ConsumerGroupState.EMPTY, "state " + ours.state());
        return ours.toString();
    }

    String describeGroups() throws Exception {
        check(committedAfterFirstRun != null, "the group never ran (consumer.group failed)");
        List<String> problems = new ArrayList<>();
        // While both members were consuming (captured by consumer.resume).
        if (describedWhileActive == null) {
            problems.add("no description while active (consumer.resume failed before it)");
        } else {
            ConsumerGroupDescription d = describedWhileActive;
            if (d.state() != ConsumerGroupState.STABLE) {
                problems.add("active: state " + d.state());
            }
            if (d.members().size() != 2) {
                problems.add("active: " + d.members().size() + " members");
            }
            if (d.isSimpleConsumerGroup()) {
                problems.add("active: simple group");
            }
            if (d.partitionAssignor() == null || d.partitionAssignor().isEmpty()) {
                problems.add("active: no assignor");
            }
            Set<TopicPartition> assigned = new HashSet<>();
            for (MemberDescription m : d.members()) {
                if (m.clientId() == null || !m.clientId().startsWith("jc-resume-")) {
                    problems.add("active: member client id " + m.clientId());
                }
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    if (!assigned.add(tp)) {
                        problems.add("active: " + tp + " assigned twice");
                    }
                    Set<String> owners = activeAssignment == null ? null : activeAssignment.get(tp);
                    if (owners != null && !owners.contains(m.clientId())) {
                        problems.add("active: " + tp + " described as " + m.clientId() + "'s, consumer says " + owners);
                    }
                }
            }
            if (!assigned.equals(new HashSet<>(dataPartitions()))) {
                problems.add("active: assignments cover " + assigned);
            }
        }
        // After both closed.
        ConsumerGroupDescription after = get(admin().describeConsumerGroups(List.of(group)).all()).get(group);
        if (after.state() != ConsumerGroupState.EMPTY || !after.members().isEmpty()) {
            problems.add("after close: state " + after.state() + ", " + after.members().size() + " members");
        }
        check(problems.isEmpty(), String.join("; ", problems));
        ConsumerGroupDescription d = describedWhileActive;
        return "active: " + d.state() + " " + d.members().size() + " members assignor " + d.partitionAssignor()
            + " coordinator " + d.coordinator().id() + "; after close: " + after.state();
    }

    String listGroupOffsets() throws Exception {
        Map<TopicPartition, Long> want = committedAfterResume != null ? committedAfterResume : committedAfterFirstRun;
        check(want != null, "no committed offsets (consumer.group failed)");
        Map<TopicPartition, OffsetAndMetadata> got = get(admin().listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        Map<TopicPartition, Long> offsets = new HashMap<>();
        got.forEach((tp, om) -> offsets.put(tp, om == null ? null : om.offset()));
        check(offsets.equals(want), "listConsumerGroupOffsets " + offsets + ", expected " + want);
        return offsets.size() + " partitions";
    }

    String deleteGroups() throws Exception {
        check(committedAfterFirstRun != null, "the group never ran (consumer.group failed)");
        get(admin().deleteConsumerGroups(List.of(group)).all());
        Collection<ConsumerGroupListing> groups = get(admin().listConsumerGroups().all());
        check(groups.stream().noneMatch(g -> g.groupId().equals(group)), "still listed after delete: " + groups);
        // Kafka answers either with nothing / DEAD or with GROUP_ID_NOT_FOUND, depending on versions.
        String offsetsAfter;
        try {
            Map<TopicPartition, OffsetAndMetadata> offsets =
                get(admin().listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
            check(offsets.isEmpty(), "offsets still there after delete: " + offsets);
            offsetsAfter = "no offsets";
        } catch (ExecutionException e) {
            check(e.getCause() instanceof GroupIdNotFoundException, "listConsumerGroupOffsets after delete: " + JavaClientChecks.describe(e));
            offsetsAfter = "offsets: GroupIdNotFound";
        }
        String describedAfter;
        try {
            ConsumerGroupDescription d = get(admin().describeConsumerGroups(List.of(group)).all()).get(group);
            check(d.state() == ConsumerGroupState.DEAD, "described after delete as " + d.state());
            describedAfter = "described as DEAD";
        } catch (ExecutionException e) {
            check(e.getCause() instanceof GroupIdNotFoundException, "describeConsumerGroups after delete: " + JavaClientChecks.describe(e));
            describedAfter = "describe: GroupIdNotFound";
        }
        return "deleted; not listed, " + offsetsAfter + ", " + describedAfter;
    }

    // ------------------------------------------------------------------ cleanup

    /** Deletes what is left; null if all went well, else what did not. */
    String cleanup() {
        List<String> problems = new ArrayList<>();
        if (admin == null) {
            return null;
        }
        if (!created.isEmpty()) {
            try {
                get(admin.deleteTopics(created).all());
            } catch (Exception e) {
                if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
                    problems.add("deleteTopics " + created + ": " + JavaClientChecks.describe(e));
                }
            }
        }
        try {
            Collection<ConsumerGroupListing> groups = get(admin.listConsumerGroups().all());
            if (groups.stream().anyMatch(g -> g.groupId().equals(group))) {
                get(admin.deleteConsumerGroups(List.of(group)).all());
            }
        } catch (Exception e) {
            problems.add("deleteConsumerGroups: " + JavaClientChecks.describe(e));
        }
        return problems.isEmpty() ? null : String.join("; ", problems);
    }

    @Override
    public void close() {
        if (admin != null) {
            admin.close(Duration.ofSeconds(5));
        }
    }
}
