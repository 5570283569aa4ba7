// A consumer of the bridge's events in Node.js (kafkajs), for docs/consuming.md: it reads
// an events topic read_committed and folds each Task's events into its row with the
// guards every consumer needs, the way bridge/wire/task_row.py does:
//   - seq at or below the row's lastSeq: a duplicate (a redelivery), skipped;
//   - seq past lastSeq + 1: a gap (events missed), the row is not moved;
//   - anything after the Task's terminal event: skipped.
// It prints {"rows": {taskId: row}, "results": {applied: n, ...}} as one JSON line.
//
//   node fold.js --bootstrap HOST:PORT --topic EVENTS --expect N [--timeout SECONDS]
//
// --expect: stop once N records were read (kafkajs consumes through a consumer group and
// has no "read to the end"); --timeout: give up after this long (default 60), printing
// what it has and exiting 2.
import { Kafka, logLevel } from 'kafkajs'
import { randomUUID } from 'node:crypto'
import { parseArgs } from 'node:util'

const MAX_ARTIFACTS = 64
const PAUSED = new Set(['input-required', 'auth-required'])

function newRow (e) {
  return {
    taskKey: e.taskKey,
    taskId: e.taskId,
    contextId: e.contextId ?? null,
    agent: e.agent,
    state: null,
    outcome: null,
    terminal: false,
    lastSeq: 0,
    startCommandId: e.commandId,
    commandId: e.commandId,
    question: null,
    artifacts: [],
    artifactsOmitted: 0,
    createdAt: e.time,
    updatedAt: e.time,
    closedAt: null
  }
}

// What became of the event, and the row after it (see the header).
export function fold (row, e) {
  if (row == null) {
    if (e.seq !== 1) return ['gap', null]
    row = newRow(e)
  } else if (e.taskId !== row.taskId) {
    return ['other-task', row]
  }
  if (!Number.isInteger(e.seq) || e.seq <= row.lastSeq) return ['duplicate', row]
  if (row.terminal) return ['after-terminal', row]
  if (e.seq !== row.lastSeq + 1) return ['gap', row]
  apply(row, e)
  return ['applied', row]
}

function apply (row, e) {
  row.lastSeq = e.seq
  row.updatedAt = e.time
  row.commandId = e.commandId
  if (e.contextId) row.contextId = e.contextId
  if (e.kind === 'status') {
    row.state = e.state ?? null
    row.question = PAUSED.has(e.state) ? (e.message ?? null) : null
  } else if (e.kind === 'artifact') {
    artifact(row, e.artifact ?? {})
  } else if (e.kind === 'bridge') {
    row.outcome = e.outcome ?? null
  }
  if (e.terminal === true) {
    row.terminal = true
    row.closedAt = e.time
  }
}

function artifact (row, a) {
  const parts = a.parts ?? []
  const grown = { parts: parts.length, bytes: parts.reduce((n, p) => n + partBytes(p), 0) }
  let entry = row.artifacts.find((x) => x.artifactId === a.artifactId)
  if (entry === undefined) {
    if (row.artifacts.length >= MAX_ARTIFACTS) {
      if (!a.append) row.artifactsOmitted += 1
      return
    }
    entry = { artifactId: a.artifactId ?? null, name: null, parts: 0, bytes: 0, lastChunk: false }
    row.artifacts.push(entry)
  }
  if (a.name) entry.name = a.name
  if (a.append) {
    entry.parts += grown.parts
    entry.bytes += grown.bytes
  } else {
    Object.assign(entry, grown)
  }
  entry.lastChunk = a.lastChunk === true
}

// UTF-8 bytes of a text part, of the JSON of a data part, of a file part's base64.
function partBytes (p) {
  if (p === null || typeof p !== 'object') return 0
  if (typeof p.text === 'string') return Buffer.byteLength(p.text, 'utf8')
  if ('data' in p) return Buffer.byteLength(JSON.stringify(p.data), 'utf8')
  if (p.file && typeof p.file.bytes === 'string') return p.file.bytes.length
  return 0
}

// An events-topic value as an event, or null when it is not one (bridge/wire/event_values.py).
function decode (value) {
  if (!value || value.length === 0) return null
  let doc
  try {
    doc = JSON.parse(value.toString('utf8'))
  } catch {
    return null
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) return null
  if (typeof doc.taskId !== 'string' || !doc.taskId || !Number.isInteger(doc.seq) || doc.seq < 1) return null
  return doc
}

async function main () {
  const { values } = parseArgs({
    options: {
      bootstrap: { type: 'string' },
      topic: { type: 'string' },
      expect: { type: 'string' },
      timeout: { type: 'string', default: '60' }
    }
  })
  const expect = Number(values.expect)
  const kafka = new Kafka({
    clientId: 'bridge-consumer-js',
    brokers: values.bootstrap.split(','),
    // kafkajs logs to stdout by default: the JSON answer goes there.
    logLevel: logLevel.ERROR,
    logCreator: () => ({ namespace, log }) => console.error(`${namespace}: ${log.message}`)
  })
  // readUncommitted: false is read_committed: aborted transactions are never seen.
  const consumer = kafka.consumer({ groupId: `fold-js-${randomUUID()}`, readUncommitted: false })
  const rows = {}
  const results = {}
  let read = 0
  let finish
  const done = new Promise((resolve) => { finish = resolve })
  const timer = setTimeout(() => finish(2), Number(values.timeout) * 1000)
  await consumer.connect()
  await consumer.subscribe({ topic: values.topic, fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      read += 1
      const e = decode(message.value)
      const [result, row] = e === null ? ['not-an-event', null] : fold(rows[e.taskId], e)
      if (row !== null) rows[e.taskId] = row
      results[result] = (results[result] ?? 0) + 1
      if (read >= expect) finish(0)
    }
  })
  const code = await done
  clearTimeout(timer)
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ rows, results }) + '\n')
  process.exit(code)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
