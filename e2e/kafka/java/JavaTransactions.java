// Kafka transactions with the Java client (org.apache.kafka:kafka-clients): COUNT committed
// transactions of 10 records and one aborted between each two, read back by a read_committed
// consumer (every committed record once, no aborted one) and a read_uncommitted one (all);
// then a second producer with the same transactional.id fences the first.
//
// Usage: java -cp '.tools/java/*' JavaTransactions.java BOOTSTRAP TOPIC COUNT
// Exits 1 with a line saying what differed.

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaTransactions {
    static void fail(String msg) {
        System.err.println("java_transactions: " + msg);
        System.exit(1);
    }

    static KafkaProducer<String, String> producer(String bootstrap, String id) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        KafkaProducer<String, String> p = new KafkaProducer<>(pp);
        p.initTransactions();
        return p;
    }

    static Set<String> read(String bootstrap, String topic, String isolation, int expect) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, "jtx-" + isolation + "-" + System.nanoTime());
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        Set<String> got = new HashSet<>();
        int seen = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            long quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    seen++;
                    if (!got.add(r.value())) fail(isolation + ": " + r.value() + " read twice");
                }
                if (got.size() >= expect && quietUntil == Long.MAX_VALUE) {
                    quietUntil = System.currentTimeMillis() + 2_000;
                }
            }
        }
        if (seen != got.size()) fail(isolation + ": duplicates");
        return got;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        Set<String> committed = new HashSet<>();
        KafkaProducer<String, String> p = producer(bootstrap, "java-tx");
        for (int t = 0; t < count; t++) {
            p.beginTransaction();
            for (int i = 0; i < 10; i++) {
                String v = "c" + t + "-" + i;
                p.send(new ProducerRecord<>(topic, v, v));
                committed.add(v);
            }
            p.commitTransaction();
            if (t + 1 < count) {
                p.beginTransaction();
                for (int i = 0; i < 10; i++) {
                    String v = "a" + t + "-" + i;
                    p.send(new ProducerRecord<>(topic, v, v));
                }
                p.flush();
                p.abortTransaction();
            }
        }
        Set<String> rc = read(bootstrap, topic, "read_committed", committed.size());
        if (!rc.equals(committed)) {
            fail("read_committed read " + rc.size() + " of " + committed.size() + " committed");
        }
        Set<String> ru = read(bootstrap, topic, "read_uncommitted", committed.size() + 10 * (count - 1));
        if (ru.size() != committed.size() + 10 * (count - 1)) {
            fail("read_uncommitted read " + ru.size());
        }
        // A second instance fences the first.
        KafkaProducer<String, String> p2 = producer(bootstrap, "java-tx");
        try {
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, "zombie", "zombie")).get();
            p.commitTransaction();
            fail("the zombie committed");
        } catch (ProducerFencedException e) {
            // As Kafka answers.
        } catch (java.util.concurrent.ExecutionException e) {
            if (!(e.getCause() instanceof ProducerFencedException)) fail("zombie: " + e);
        }
        p2.beginTransaction();
        p2.send(new ProducerRecord<>(topic, "after", "after"));
        p2.commitTransaction();
        p2.close();
        committed.add("after");
        Set<String> end = read(bootstrap, topic, "read_committed", committed.size());
        if (!end.equals(committed)) fail("after the fence read_committed read " + end.size());
        System.out.println("java_transactions: " + count + " committed, " + (count - 1)
            + " aborted, the zombie fenced");
        System.exit(0);
    }
}
