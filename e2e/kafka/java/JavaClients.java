// Produces keyed records through a Lakelog Kafka listener with the Java client
// (org.apache.kafka:kafka-clients, its defaults: idempotent, acks=all) and reads every one
// back with its consumer, at its acked offset, in the partition its default partitioner picks.
//
// Usage: java -cp '.tools/java/*' JavaClients.java BOOTSTRAP TOPIC COUNT
// Exits 1 with a line saying what differed.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;

public class JavaClients {
    static void fail(String msg) {
        System.err.println("java_clients: " + msg);
        System.exit(1);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);

        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Map<String, long[]> acked = new ConcurrentHashMap<>();
        AtomicReference<Exception> failed = new AtomicReference<>();
        int partitions;
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            List<PartitionInfo> info = p.partitionsFor(topic);
            partitions = info.size();
            for (int i = 0; i < count; i++) {
                String value = "java-" + i;
                p.send(new ProducerRecord<>(topic, "key-" + (i % 97), value), (md, e) -> {
                    if (e != null) {
                        failed.compareAndSet(null, e);
                    } else {
                        acked.put(value, new long[] {md.partition(), md.offset()});
                    }
                });
            }
            p.flush();
        }
        if (failed.get() != null) {
            fail("send: " + failed.get());
        }
        if (acked.size() != count) {
            fail(acked.size() + " of " + count + " records acked");
        }
        for (int i = 0; i < count; i++) {
            byte[] key = ("key-" + (i % 97)).getBytes();
            int want = Utils.toPositive(Utils.murmur2(key)) % partitions;
            long[] at = acked.get("java-" + i);
            if (at[0] != want) {
                fail("java-" + i + " went to partition " + at[0] + ", its key's is " + want);
            }
        }

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        Map<String, List<long[]>> seen = new HashMap<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int q = 0; q < partitions; q++) {
                tps.add(new TopicPartition(topic, q));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, Duration.ofSeconds(30));
            long deadline = System.nanoTime() + Duration.ofSeconds(120).toNanos();
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    done &= c.position(tp, Duration.ofSeconds(30)) >= ends.get(tp);
                }
                if (done) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    fail("reading back stalled below " + ends);
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofSeconds(1))) {
                    seen.computeIfAbsent(r.value(), v -> new ArrayList<>())
                        .add(new long[] {r.partition(), r.offset()});
                }
            }
        }
        for (Map.Entry<String, long[]> a : acked.entrySet()) {
            List<long[]> at = seen.get(a.getKey());
            if (at == null || at.size() != 1 || at.get(0)[0] != a.getValue()[0]
                    || at.get(0)[1] != a.getValue()[1]) {
                fail(a.getKey() + " acked at " + a.getValue()[0] + "/" + a.getValue()[1]
                    + ", read " + (at == null ? 0 : at.size()) + " times");
            }
        }
        if (seen.size() != count) {
            fail(seen.size() + " distinct records read, " + count + " produced");
        }
        System.out.println("java_clients: " + count + " records produced and read back once each");
    }
}
