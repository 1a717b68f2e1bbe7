// The Java client's share consumer (KafkaShareConsumer, KIP-932) against Lakelog.
//
//   run   <bootstrap> <topic> <group> <count>: the group set to start at the earliest record,
//         a 15 s lock and a delivery limit of 3; <count> records produced to the topic's one
//         partition; three members consume them at once in explicit acknowledgement mode.
//         Every 50th record is released at its first delivery and must come back with a
//         delivery count of 2; every 500th (from 7) is released at every delivery and must
//         go out exactly 3 times, then never again (archived). Every other record must be
//         accepted exactly once, and at least two members must have accepted some.
//   hold  <bootstrap> <topic> <group> <count>: the group's lock set to 60 s; <count> records
//         produced, then acquired and never acknowledged; prints HELD and waits to be killed.
//   drain <bootstrap> <topic> <group> <count>: accepts records until <count> are, for 45 s at
//         most (less than the lock: the killed member's records must come back because its
//         connection closed, not because its locks ran out); some must come with a delivery
//         count of 2 (the killed member held them first).
//
// Exits non-zero with a message on any check that fails.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class JavaShare {
    static final int LIMIT = 3;

    static void fail(String msg) {
        System.err.println("FAILED: " + msg);
        System.exit(1);
    }

    static void configure(String bootstrap, String group) throws Exception {
        configure(bootstrap, group, 15000);
    }

    static void configure(String bootstrap, String group, int lockMs) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            ConfigResource g = new ConfigResource(ConfigResource.Type.GROUP, group);
            List<AlterConfigOp> ops = List.of(
                new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("share.record.lock.duration.ms", String.valueOf(lockMs)), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("share.delivery.count.limit", String.valueOf(LIMIT)), AlterConfigOp.OpType.SET));
            admin.incrementalAlterConfigs(Map.of(g, ops)).all().get();
        }
    }

    static void produce(String bootstrap, String topic, int count) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "5");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, String.valueOf(i), "v" + i));
            }
            producer.flush();
        }
    }

    static KafkaShareConsumer<String, String> member(String bootstrap, String topic, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("max.poll.records", "100");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
        c.subscribe(List.of(topic));
        return c;
    }

    static boolean poison(int key) {
        return key % 500 == 7;
    }

    static boolean releaseOnce(int key) {
        return key % 50 == 0 && !poison(key);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2], group = args[3];
        int count = Integer.parseInt(args[4]);
        switch (mode) {
            case "run" -> run(bootstrap, topic, group, count);
            case "hold" -> hold(bootstrap, topic, group, count);
            case "drain" -> drain(bootstrap, topic, group, count);
            default -> fail("mode " + mode);
        }
    }

    static void run(String bootstrap, String topic, String group, int count) throws Exception {
        configure(bootstrap, group);
        produce(bootstrap, topic, count);
        int poisons = 0;
        for (int i = 0; i < count; i++) if (poison(i)) poisons++;
        final int wanted = count - poisons;
        ConcurrentHashMap<Integer, AtomicInteger> accepted = new ConcurrentHashMap<>();
        ConcurrentHashMap<Integer, AtomicInteger> poisonDeliveries = new ConcurrentHashMap<>();
        ConcurrentHashMap<Integer, Short> releasedCameBack = new ConcurrentHashMap<>();
        AtomicInteger acceptedTotal = new AtomicInteger();
        AtomicReference<String> problem = new AtomicReference<>();
        AtomicBoolean stop = new AtomicBoolean();
        int members = 3;
        int[] perMember = new int[members];
        ExecutorService pool = Executors.newFixedThreadPool(members);
        List<Future<?>> running = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            final int me = m;
            running.add(pool.submit(() -> {
                try (KafkaShareConsumer<String, String> c = member(bootstrap, topic, group)) {
                    while (!stop.get()) {
                        ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(500));
                        List<Integer> acceptedHere = new ArrayList<>();
                        for (ConsumerRecord<String, String> r : rs) {
                            int key = Integer.parseInt(r.key());
                            short dc = r.deliveryCount().orElse((short) -1);
                            if (dc < 1 || dc > LIMIT) problem.compareAndSet(null, "record " + key + " delivered with count " + dc);
                            if (poison(key)) {
                                poisonDeliveries.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
                                c.acknowledge(r, AcknowledgeType.RELEASE);
                            } else if (releaseOnce(key) && dc == 1) {
                                c.acknowledge(r, AcknowledgeType.RELEASE);
                            } else {
                                if (releaseOnce(key)) releasedCameBack.put(key, dc);
                                c.acknowledge(r, AcknowledgeType.ACCEPT);
                                acceptedHere.add(key);
                            }
                        }
                        Map<TopicIdPartition, Optional<KafkaException>> done = c.commitSync();
                        boolean ok = done.values().stream().allMatch(Optional::isEmpty);
                        if (ok) {
                            for (int key : acceptedHere) {
                                if (accepted.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet() > 1) {
                                    problem.compareAndSet(null, "record " + key + " accepted twice");
                                }
                                acceptedTotal.incrementAndGet();
                                perMember[me]++;
                            }
                        } else {
                            System.err.println("member " + me + ": an acknowledgement failed: " + done);
                        }
                    }
                }
                return null;
            }));
        }
        long deadline = System.currentTimeMillis() + 180_000;
        while (System.currentTimeMillis() < deadline && problem.get() == null) {
            boolean poisonsDone = poisonDeliveries.size() == poisons
                && poisonDeliveries.values().stream().allMatch(n -> n.get() >= LIMIT);
            if (acceptedTotal.get() >= wanted && poisonsDone) break;
            Thread.sleep(200);
        }
        // A while longer: nothing more may come (an archived record delivered again, a
        // record accepted twice).
        Thread.sleep(3_000);
        stop.set(true);
        for (Future<?> f : running) f.get(60, TimeUnit.SECONDS);
        pool.shutdown();
        if (problem.get() != null) fail(problem.get());
        if (acceptedTotal.get() != wanted) fail(acceptedTotal.get() + " records accepted of " + wanted);
        for (int i = 0; i < count; i++) {
            if (poison(i)) {
                int n = poisonDeliveries.getOrDefault(i, new AtomicInteger()).get();
                if (n != LIMIT) fail("poison record " + i + " delivered " + n + " times, not " + LIMIT);
            } else if (releaseOnce(i) && releasedCameBack.getOrDefault(i, (short) 0) != 2) {
                fail("released record " + i + " came back with count " + releasedCameBack.get(i));
            }
        }
        long active = Arrays.stream(perMember).filter(n -> n > 0).count();
        if (active < 2) fail("only " + active + " member accepted records: " + Arrays.toString(perMember));
        System.out.println("accepted " + acceptedTotal.get() + " by members " + Arrays.toString(perMember)
            + "; " + poisons + " poison records archived after " + LIMIT + " deliveries");
    }

    static void hold(String bootstrap, String topic, String group, int count) throws Exception {
        configure(bootstrap, group, 60000);
        produce(bootstrap, topic, count);
        KafkaShareConsumer<String, String> c = member(bootstrap, topic, group);
        int held = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        // Explicit mode: a poll after records were given throws until they are acknowledged,
        // so poll until the first records, then hold them.
        while (held == 0 && System.currentTimeMillis() < deadline) {
            held = c.poll(Duration.ofMillis(500)).count();
        }
        if (held == 0) fail("nothing acquired");
        System.out.println("HELD " + held);
        System.out.flush();
        Thread.sleep(600_000);
    }

    static void drain(String bootstrap, String topic, String group, int count) throws Exception {
        long start = System.currentTimeMillis();
        Set<Integer> seen = new HashSet<>();
        int redelivered = 0;
        try (KafkaShareConsumer<String, String> c = member(bootstrap, topic, group)) {
            long deadline = start + 45_000;
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (r.deliveryCount().orElse((short) 0) >= 2) redelivered++;
                    seen.add(Integer.parseInt(r.key()));
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                c.commitSync();
            }
        }
        if (seen.size() != count) fail(seen.size() + " records of " + count);
        if (redelivered == 0) fail("no record came back from the killed member");
        System.out.println("drained " + seen.size() + ", " + redelivered + " redelivered after "
            + (System.currentTimeMillis() - start) + " ms");
    }
}
