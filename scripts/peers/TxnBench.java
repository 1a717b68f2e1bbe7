// A Kafka transactional producer (the Java client 4.4.0) committing every COMMIT_MS: it sends
// RECORD_SIZE-byte records for COMMIT_MS, as fast as the client takes them or at RATE_MIB MiB/s
// (0: as fast), then commits, for SECONDS in all. Prints one JSON line: records sent (all committed), seconds, commits, and
// commitTransaction's latency p50 and p99 in ms (the flush of the transaction's records
// included, as an application waits for it).
//
// Usage: TxnBench BOOTSTRAP TOPIC SECONDS RECORD_SIZE COMMIT_MS [RATE_MIB]
import java.util.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnBench {
    static double pct(List<Double> sorted, double q) {
        if (sorted.isEmpty()) return 0;
        return sorted.get(Math.min(sorted.size() - 1, (int) Math.ceil(q * sorted.size()) - 1));
    }

    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        double seconds = Double.parseDouble(a[2]);
        int size = Integer.parseInt(a[3]);
        long commitNanos = Long.parseLong(a[4]) * 1_000_000L;
        double rate = a.length > 5 ? Double.parseDouble(a[5]) * 1024 * 1024 : 0;
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "txn-bench-" + System.nanoTime());
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        byte[] value = new byte[size];
        new Random(1).nextBytes(value);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            List<Double> commits = new ArrayList<>();
            long records = 0, start = System.nanoTime();
            long end = start + (long) (seconds * 1e9);
            while (System.nanoTime() < end) {
                producer.beginTransaction();
                long began = System.nanoTime();
                while (System.nanoTime() - began < commitNanos) {
                    if (rate > 0) {
                        long due = start + (long) (records * size / rate * 1e9);
                        long wait = due - System.nanoTime();
                        if (wait > 0) { Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L)); continue; }
                    }
                    producer.send(new ProducerRecord<>(topic, null, value));
                    records++;
                }
                long c0 = System.nanoTime();
                producer.commitTransaction();
                commits.add((System.nanoTime() - c0) / 1e6);
            }
            double elapsed = (System.nanoTime() - start) / 1e9;
            Collections.sort(commits);
            System.out.printf(Locale.ROOT,
                "{\"records\": %d, \"seconds\": %.3f, \"commits\": %d, \"commit_p50_ms\": %.1f, \"commit_p99_ms\": %.1f}%n",
                records, elapsed, commits.size(), pct(commits, 0.5), pct(commits, 0.99));
        }
    }
}
