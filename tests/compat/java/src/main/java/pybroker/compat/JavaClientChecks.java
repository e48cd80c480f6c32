package pybroker.compat;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutionException;

/**
 * Runs named checks of the Java Kafka client against one broker and prints one line per
 * check: {@code PASS name (detail)}, {@code FAIL name: reason} or {@code SKIP name: reason}.
 * Exit code 0 only if no check failed; 1 if one did; 2 for a usage error; 3 if the overall
 * deadline ran out (the checks still running are reported as failed).
 *
 * <pre>
 * java -cp 'target/classes:target/lib/*' pybroker.compat.JavaClientChecks BOOTSTRAP
 *      [--only PREFIX[,PREFIX...]] [--deadline-s SECONDS] [--list]
 * </pre>
 *
 * The checks share state (the data topic, the group) and run in the order listed by
 * {@code --list}; {@code --only} keeps the checks whose names start with one of the prefixes
 * (setup, such as creating the topics, runs whenever a kept check needs it). Client logging
 * is slf4j-simple at WARN on stderr; {@code -Dorg.slf4j.simpleLogger.defaultLogLevel=debug}
 * shows every request.
 */
public final class JavaClientChecks {

    private JavaClientChecks() {
    }

    public static void main(String[] args) throws Exception {
        // Before any client class creates its logger.
        defaultProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        defaultProperty("org.slf4j.simpleLogger.showDateTime", "true");
        defaultProperty("org.slf4j.simpleLogger.dateTimeFormat", "HH:mm:ss.SSS");
        defaultProperty("org.slf4j.simpleLogger.logFile", "System.err");

        String bootstrap = null;
        List<String> only = new ArrayList<>();
        long deadlineS = 150;
        boolean list = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--only" -> only.addAll(Arrays.asList(args[++i].split(",")));
                case "--deadline-s" -> deadlineS = Long.parseLong(args[++i]);
                case "--list" -> list = true;
                default -> {
                    if (args[i].startsWith("-") || bootstrap != null) {
                        System.err.println("usage: JavaClientChecks BOOTSTRAP [--only PREFIX,...] [--deadline-s N] [--list]");
                        System.exit(2);
                    }
                    bootstrap = args[i];
                }
            }
        }
        if (bootstrap == null && !list) {
            System.err.println("usage: JavaClientChecks BOOTSTRAP [--only PREFIX,...] [--deadline-s N] [--list]");
            System.exit(2);
        }

        Checks checks = new Checks(bootstrap == null ? "unused:0" : bootstrap);
        List<Checks.Named> all = checks.all();
        if (list) {
            for (Checks.Named named : all) {
                System.out.println(named.name());
            }
            return;
        }
        Set<String> selected = new LinkedHashSet<>();
        for (Checks.Named named : all) {
            if (only.isEmpty() || only.stream().anyMatch(p -> named.name().startsWith(p))) {
                selected.add(named.name());
            }
        }

        final long deadline = deadlineS;
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(deadline * 1000);
            } catch (InterruptedException e) {
                return;
            }
            String running = checks.current();
            System.out.println("FAIL " + (running == null ? "deadline" : running)
                + ": overall deadline of " + deadline + " s ran out (thread dump on stderr)");
            Thread.getAllStackTraces().forEach((t, stack) -> {
                System.err.println("thread " + t.getName());
                for (StackTraceElement e : stack) {
                    System.err.println("    at " + e);
                }
            });
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "deadline");
        watchdog.setDaemon(true);
        watchdog.start();

        int passed = 0;
        int failed = 0;
        int skipped = 0;
        try {
            for (Checks.Named named : all) {
                if (!selected.contains(named.name()) && !(named.setup() && checks.neededBy(named, selected))) {
                    continue;
                }
                long start = System.nanoTime();
                checks.setCurrent(named.name());
                String line;
                try {
                    String detail = named.check().run();
                    line = "PASS " + named.name() + (detail == null || detail.isEmpty() ? "" : " (" + detail + ")");
                    passed++;
                } catch (Checks.Skip skip) {
                    line = "SKIP " + named.name() + ": " + skip.getMessage();
                    skipped++;
                } catch (Throwable t) {
                    line = "FAIL " + named.name() + ": " + describe(t);
                    failed++;
                    System.err.println("FAIL " + named.name() + " stack trace:");
                    t.printStackTrace();
                }
                long ms = (System.nanoTime() - start) / 1_000_000;
                System.out.println(line + " [" + ms + " ms]");
                System.out.flush();
            }
        } finally {
            checks.setCurrent("cleanup");
            String problem = checks.cleanup();
            if (problem != null) {
                System.out.println("FAIL cleanup: " + problem);
                failed++;
            }
            checks.close();
        }
        // Not "N passed, N failed": that shape is read as a test runner's closing line.
        System.out.println("summary: passed=" + passed + " failed=" + failed + " skipped=" + skipped);
        System.out.flush();
        System.exit(failed == 0 ? 0 : 1);
    }

    private static void defaultProperty(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    /** One line: the exception chain's classes and messages (ExecutionException unwrapped). */
    static String describe(Throwable t) {
        StringBuilder out = new StringBuilder();
        Throwable cur = t;
        int depth = 0;
        while (cur != null && depth < 4) {
            if (!(cur instanceof ExecutionException) || cur.getCause() == null) {
                if (out.length() > 0) {
                    out.append(" <- ");
                }
                out.append(cur.getClass().getSimpleName());
                if (cur.getMessage() != null) {
                    out.append(": ").append(cur.getMessage());
                }
            }
            if (cur.getCause() == cur) {
                break;
            }
            cur = cur.getCause();
            depth++;
        }
        return out.toString().replace('\n', ' ').replace('\r', ' ');
    }
}
