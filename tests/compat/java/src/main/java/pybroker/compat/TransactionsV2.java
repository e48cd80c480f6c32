// Transactions version 2 (KIP-890 part 2) as the Java client uses it once the
// broker finalizes transaction.version 2: no AddPartitionsToTxn or
// AddOffsetsToTxn, and the producer epoch bumped at every transaction end.
package pybroker.compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

final class TransactionsV2 {
    private TransactionsV2() {
    }

    static KafkaProducer<byte[], byte[]> producer(Checks checks, String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, checks.bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static TransactionDescription describe(Checks checks, String transactionalId) throws Exception {
        return Checks.get(checks.admin().describeTransactions(List.of(transactionalId)).description(transactionalId));
    }

    /** Commit, abort, commit with offsets sent to each transaction; the epoch grows by one per
     *  transaction, read_committed sees only the committed records, and a second producer
     *  instance fences the first. Skipped below transaction.version 2. */
    static String check(Checks checks) throws Exception {
        FinalizedVersionRange level =
            Checks.get(checks.admin().describeFeatures().featureMetadata()).finalizedFeatures().get("transaction.version");
        if (level == null || level.maxVersionLevel() < 2) {
            throw new Checks.Skip("transaction.version 2 is not finalized on this broker (" + level + ")");
        }
        String topic = "jc-txn2-" + checks.run;
        Checks.get(checks.admin().createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
        checks.created.add(topic);
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        String transactionalId = "jc-txn2-" + checks.run;
        String group = "jc-txn2-group-" + checks.run;
        List<String> expected = new ArrayList<>();
        List<Integer> epochs = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(checks, transactionalId)) {
            producer.initTransactions();
            epochs.add((int) describe(checks, transactionalId).producerEpoch());
            for (int round = 0; round < 3; round++) {
                boolean commit = round != 1;
                producer.beginTransaction();
                for (TopicPartition tp : List.of(tp0, tp1)) {
                    String value = (commit ? "committed-" : "aborted-") + round + "-" + tp.partition();
                    Checks.get(producer.send(new ProducerRecord<>(topic, tp.partition(), Checks.bytes("k"), Checks.bytes(value))));
                    if (commit && tp.equals(tp0)) {
                        expected.add(value);
                    }
                }
                producer.sendOffsetsToTransaction(Map.of(tp0, new OffsetAndMetadata(round + 1)), new ConsumerGroupMetadata(group));
                if (commit) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                epochs.add((int) describe(checks, transactionalId).producerEpoch());
            }
            for (int i = 1; i < epochs.size(); i++) {
                Checks.check(epochs.get(i) == epochs.get(i - 1) + 1, "producer epochs " + epochs + ": not one bump per transaction");
            }
            // A second instance fences this one.
            try (KafkaProducer<byte[], byte[]> newer = producer(checks, transactionalId)) {
                newer.initTransactions();
                boolean fenced = false;
                try {
                    producer.beginTransaction();
                    Checks.get(producer.send(new ProducerRecord<>(topic, 0, Checks.bytes("k"), Checks.bytes("zombie"))));
                    producer.commitTransaction();
                } catch (ProducerFencedException e) {
                    fenced = true;
                } catch (java.util.concurrent.ExecutionException e) {
                    fenced = e.getCause() instanceof ProducerFencedException
                        || e.getCause() instanceof org.apache.kafka.common.errors.InvalidProducerEpochException;
                } catch (org.apache.kafka.common.KafkaException e) {
                    fenced = e.getCause() instanceof ProducerFencedException
                        || e.getCause() instanceof org.apache.kafka.common.errors.InvalidProducerEpochException;
                }
                Checks.check(fenced, "the older producer instance was not fenced");
            }
        }
        List<String> committed = checks.readValues(tp0, "read_committed", expected.size());
        Checks.check(committed.equals(expected), "read_committed read " + committed + ", expected " + expected);
        Map<TopicPartition, OffsetAndMetadata> offsets =
            Checks.get(checks.admin().listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        Checks.check(offsets.get(tp0) != null && offsets.get(tp0).offset() == 3, "group offsets " + offsets + ", expected 3");
        return "epochs " + epochs + ", read_committed " + committed.size() + " records";
    }
}
