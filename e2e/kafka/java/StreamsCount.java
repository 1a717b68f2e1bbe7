// Kafka Streams 4.4.0, unmodified, as an application runs it: a word count with a
// repartition topic and a KTable whose store is backed by a compacted changelog, both
// created by Streams itself with its own configs (no record cache: each update reaches the
// changelog).
//
// Usage: StreamsCount BOOTSTRAP APP_ID STATE_DIR PHASE LINES [GUARANTEE [INPUT]]
//   Produces LINES lines of words (phase PHASE's: a fixed mix, so every count is known;
//   INPUT "resume" produces none, the phase's lines being there from a run killed before),
//   runs the application (GUARANTEE: at_least_once, the default, or exactly_once_v2) until
//   the output topic's latest count of every word, read committed, is what all phases up to
//   PHASE produced, closes it. Exits 1 with a line saying what differed; a count past the one
//   wanted is a record counted twice.
//   Between phases the test deletes STATE_DIR: the next run rebuilds the counts from the
//   changelog topic.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

public class StreamsCount {
    static final String[] WORDS = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"};

    // Line i of a phase: words i % 7, (i * 3) % 7 and, for even i, (i + phase) % 7.
    static List<String> line(int phase, int i) {
        List<String> w = new ArrayList<>(List.of(WORDS[i % 7], WORDS[(i * 3) % 7]));
        if (i % 2 == 0) w.add(WORDS[(i + phase) % 7]);
        return w;
    }

    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], app = a[1], stateDir = a[2];
        int phase = Integer.parseInt(a[3]), lines = Integer.parseInt(a[4]);
        String guarantee = a.length > 5 ? a[5] : StreamsConfig.AT_LEAST_ONCE;
        boolean produce = a.length <= 6 || !a[6].equals("resume");
        String in = app + "-words", out = app + "-counts";
        Map<String, Long> want = new TreeMap<>();
        for (int p = 1; p <= phase; p++)
            for (int i = 0; i < lines; i++)
                for (String w : line(p, i)) want.merge(w, 1L, Long::sum);

        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        if (produce) try (Producer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < lines; i++)
                p.send(new ProducerRecord<>(in, "line-" + phase + "-" + i, String.join(" ", line(phase, i))));
            p.flush();
        }

        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(in)
            .flatMapValues(v -> Arrays.asList(v.split(" ")))
            .groupBy((k, w) -> w)
            .count(Materialized.as("counts"))
            .toStream()
            .to(out, Produced.with(Serdes.String(), Serdes.Long()));
        Properties sp = new Properties();
        sp.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        sp.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        sp.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        sp.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        sp.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        // Every update to the changelog (no cache folding them): thousands of records a
        // compaction must bring down to one a word.
        sp.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        sp.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        sp.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // A run killed leaves its member in the group until its session ends: 6 s, not 45.
        sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        KafkaStreams streams = new KafkaStreams(b.build(), sp);
        Throwable[] died = {null};
        streams.setUncaughtExceptionHandler(e -> {
            died[0] = e;
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, app + "-check-" + phase + "-" + System.nanoTime());
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, LongDeserializer.class.getName());
        Map<String, Long> got = new TreeMap<>();
        long deadline = System.currentTimeMillis() + 120_000;
        try (Consumer<String, Long> c = new KafkaConsumer<>(cp)) {
            c.subscribe(List.of(out));
            while (!got.equals(want)) {
                if (died[0] != null || System.currentTimeMillis() > deadline) {
                    streams.close(Duration.ofSeconds(30));
                    System.err.println("StreamsCount: phase " + phase + " counts " + got + ", want " + want
                        + (died[0] != null ? " (the application died: " + died[0] + ")" : ""));
                    System.exit(1);
                }
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(500))) got.put(r.key(), r.value());
                // A count past the one wanted is a record counted twice.
                for (Map.Entry<String, Long> e : got.entrySet())
                    if (e.getValue() > want.getOrDefault(e.getKey(), 0L)) {
                        streams.close(Duration.ofSeconds(30));
                        System.err.println("StreamsCount: phase " + phase + " counted " + e + ", want " + want);
                        System.exit(1);
                    }
            }
        }
        if (!streams.close(Duration.ofSeconds(60))) {
            System.err.println("StreamsCount: the application did not close");
            System.exit(1);
        }
        System.out.println("phase " + phase + ": " + got);
    }
}
