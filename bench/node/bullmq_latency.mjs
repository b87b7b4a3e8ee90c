// The BullMQ reference of bench/latency.py: how soon after Queue.add() resolves does a Worker start the job?
//   node bullmq_latency.mjs worker QUEUE CONCURRENCY   -> prints "ready", then one "id start_ms" line per job
//   node bullmq_latency.mjs producer QUEUE RATE N       -> prints one "id added_ms" line per job, then "done"
// Times are wall-clock milliseconds (performance.timeOrigin + performance.now(): sub-millisecond, comparable across
// processes on one machine). Redis at REDIS_URL (default redis://127.0.0.1:6379).
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const [mode, name, a, b] = process.argv.slice(2);
const url = new URL(process.env.REDIS_URL || "redis://127.0.0.1:6379");
// BullMQ 6 takes a Redis client it does not construct itself (ioredis, as its docs show; null retries: a worker
// blocks on Redis).
const connection = new IORedis({ host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null });
const now = () => performance.timeOrigin + performance.now();

if (mode === "worker") {
  const lines = [];
  const worker = new Worker(name, async (job) => { lines.push(`${job.data.i} ${now().toFixed(3)}`); },
                            { connection, concurrency: Number(a) });
  await worker.waitUntilReady();
  process.stdout.write("ready\n");
  process.on("SIGTERM", async () => {
    await worker.close();
    process.stdout.write(lines.join("\n") + "\nend\n", () => process.exit(0));
  });
} else if (mode === "producer") {
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  const rate = Number(a), n = Number(b), lines = [];
  const t0 = now();
  for (let i = 0; i < n; i++) {
    const due = t0 + (i * 1000) / rate;
    const wait = due - now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    await queue.add("send", { i }, { removeOnComplete: true });
    lines.push(`${i} ${now().toFixed(3)}`);
  }
  await queue.close();
  process.stdout.write(lines.join("\n") + "\ndone\n", () => process.exit(0));
}
