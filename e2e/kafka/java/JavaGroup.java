// Consumer groups of the Java client with the KIP-848 protocol (group.protocol=consumer, the
// coordinator assigns): produces COUNT records, then a first member consumes and commits, a
// second joins mid-way and the partitions split between them, revoked before they move (no
// partition is owned by both at once); the first leaves and the second takes every partition.
// Every record is read, each partition's committed offset ends at its end, and a new member of
// the group reads nothing again.
//
// Usage: java -cp '.tools/java/*' JavaGroup.java BOOTSTRAP TOPIC COUNT GROUP
// Exits 1 with a line saying what differed.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaGroup {
    static void fail(String msg) {
        System.err.println("java_group: " + msg);
        System.exit(1);
    }

    static final Map<TopicPartition, String> owners = new ConcurrentHashMap<>();
    static final Set<String> seen = ConcurrentHashMap.newKeySet();

    static KafkaConsumer<String, String> member(String bootstrap, String group, String topic,
            String name) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "200");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        KafkaConsumer<String, String> c = new KafkaConsumer<>(cp);
        c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                c.commitSync();
                for (TopicPartition tp : tps) {
                    owners.remove(tp, name);
                }
            }

            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                for (TopicPartition tp : tps) {
                    String before = owners.putIfAbsent(tp, name);
                    if (before != null && !before.equals(name)) {
                        fail(tp + " assigned to " + name + " while " + before + " owns it");
                    }
                }
            }

            public void onPartitionsLost(Collection<TopicPartition> tps) {
                fail(name + " lost " + tps + " (fenced)");
            }
        });
        return c;
    }

    static int poll(KafkaConsumer<String, String> c) {
        int n = 0;
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
            seen.add(r.value());
            n++;
        }
        if (n > 0) {
            c.commitSync();
        }
        return n;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[3];
        int count = Integer.parseInt(args[2]);

        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        int partitions;
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            partitions = p.partitionsFor(topic).size();
            for (int i = 0; i < count; i++) {
                p.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i));
            }
            p.flush();
        }

        long deadline = System.nanoTime() + Duration.ofSeconds(120).toNanos();
        KafkaConsumer<String, String> a = member(bootstrap, group, topic, "a");
        // a alone until it read a first part of the records.
        while (seen.size() < count / 4) {
            poll(a);
            if (System.nanoTime() > deadline) {
                fail("a read " + seen.size() + " alone, then stalled");
            }
        }
        KafkaConsumer<String, String> b = member(bootstrap, group, topic, "b");
        // Both, until each owns part of the partitions.
        while (true) {
            poll(a);
            poll(b);
            int ofA = a.assignment().size(), ofB = b.assignment().size();
            if (ofA > 0 && ofB > 0 && ofA + ofB == partitions) {
                System.out.println("java_group: split " + ofA + "/" + ofB);
                break;
            }
            if (System.nanoTime() > deadline) {
                fail("the partitions never split: a " + a.assignment() + ", b " + b.assignment());
            }
        }
        // a leaves; b takes over and reads the rest.
        a.close();
        while (seen.size() < count || b.assignment().size() < partitions) {
            poll(b);
            if (System.nanoTime() > deadline) {
                fail(seen.size() + " of " + count + " read; b has " + b.assignment());
            }
        }
        List<TopicPartition> tps = new ArrayList<>();
        for (int q = 0; q < partitions; q++) {
            tps.add(new TopicPartition(topic, q));
        }
        Map<TopicPartition, Long> ends = b.endOffsets(tps);
        Map<TopicPartition, OffsetAndMetadata> committed = b.committed(new HashSet<>(tps));
        b.close();
        for (TopicPartition tp : tps) {
            OffsetAndMetadata c = committed.get(tp);
            if (c == null || c.offset() != ends.get(tp)) {
                fail(tp + " committed " + c + ", its end is " + ends.get(tp));
            }
        }
        // A new member starts at the committed offsets: nothing to read again.
        KafkaConsumer<String, String> c = member(bootstrap, group, topic, "c");
        long quiet = System.nanoTime() + Duration.ofSeconds(5).toNanos();
        int again = 0;
        while (System.nanoTime() < quiet) {
            again += poll(c);
        }
        Map<TopicPartition, Long> at = new HashMap<>();
        for (TopicPartition tp : c.assignment()) {
            at.put(tp, c.position(tp));
        }
        c.close();
        if (again != 0) {
            fail("a new member read " + again + " records again");
        }
        if (at.size() != partitions || !at.equals(ends)) {
            fail("a new member is at " + at + ", the ends are " + ends);
        }
        System.out.println("java_group: " + count + " records read once over a join and a leave");
    }
}
