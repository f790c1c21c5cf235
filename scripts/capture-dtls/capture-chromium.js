// Captures the DTLS ClientHello datagrams headless Chromium sends as DTLS client, for
// shoal's DTLS fixtures.
//
// Usage: node capture-chromium.js [OUT_DIR]
// OUT_DIR defaults to components/tests/fixtures/dtls in the repository.
//
// Each run (two by default, RUNS=N to change) does this, with nothing faked on the wire:
//   1. A fresh headless Chromium (Debian's /usr/bin/chromium, override with CHROMIUM=...)
//      creates an RTCPeerConnection with an audio and a video transceiver and a data
//      channel, and calls createOffer() and setLocalDescription().
//   2. shoal's own binary (SHOAL=..., default target/release/shoal) starts as the ICE-lite
//      peer, with --static-peer credentials that pair with the ufrag and pwd of that offer.
//   3. tcpdump records UDP to and from shoal's port on the loopback interface.
//   4. The page sets a constructed answer: ICE-lite, a=setup:passive (so Chromium is the
//      DTLS client), an arbitrary sha-256 fingerprint, and one host candidate, shoal's.
//      Chromium's checks reach shoal, shoal answers them, ICE connects, and Chromium sends
//      its ClientHello, which shoal drops (it has no DTLS yet), so Chromium retransmits.
//   5. The datagrams of the first transmission of the ClientHello flight are written as
//      raw UDP payloads, chromium<major>_client_hello[_runN]_<i>.bin, and tshark's decode of
//      those frames goes to chromium<major>_client_hello.txt.
// The pcap files stay in a temporary folder, whose path is printed.

'use strict';

const { spawn, execFileSync } = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const REPO = path.resolve(__dirname, '..', '..');
const EXECUTABLE = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOAL = process.env.SHOAL || path.join(REPO, 'target', 'release', 'shoal');
const RUNS = Number(process.env.RUNS || 2);
const OUT_DIR = path.resolve(
  process.argv[2] || path.join(REPO, 'components', 'tests', 'fixtures', 'dtls'),
);
const CONNECT_TIMEOUT_MS = 20000;
// After ICE connects, wait this long so the pcap also shows Chromium's retransmissions.
const LINGER_MS = 8000;

const PAGE = `<!doctype html><meta charset="utf-8"><title>shoal dtls capture</title>
<script>
let pc;
async function makeOffer() {
  pc = new RTCPeerConnection({ iceServers: [] });
  pc.addTransceiver('audio');
  pc.addTransceiver('video');
  pc.createDataChannel('x');
  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  return pc.localDescription.sdp;
}
async function connect(answer) {
  await pc.setRemoteDescription({ type: 'answer', sdp: answer });
  const ok = () => pc.iceConnectionState === 'connected' || pc.iceConnectionState === 'completed';
  if (!ok()) {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error('ICE did not connect: ' + pc.iceConnectionState)),
        ${CONNECT_TIMEOUT_MS},
      );
      pc.addEventListener('iceconnectionstatechange', () => {
        if (ok()) { clearTimeout(timer); resolve(); }
      });
    });
  }
  return pc.iceConnectionState;
}
function states() {
  return { ice: pc.iceConnectionState, connection: pc.connectionState,
           dtls: pc.sctp && pc.sctp.transport ? pc.sctp.transport.state : null };
}
</script>`;

const ICE_CHARS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
function iceString(n) {
  return Array.from(crypto.randomBytes(n), (b) => ICE_CHARS[b % ICE_CHARS.length]).join('');
}

function sdpAttr(sdp, name) {
  const m = sdp.match(new RegExp(`^a=${name}:(.*)$`, 'm'));
  if (!m) throw new Error(`offer has no a=${name}`);
  return m[1].trim();
}

// An answer for the offer's m-lines, in the same order and with the same mids.
function buildAnswer(offer, port, ufrag, pwd, fingerprint) {
  const sections = offer.split(/\r\n(?=m=)/).slice(1);
  const mids = [];
  const media = [];
  for (const section of sections) {
    const kind = section.match(/^m=(\w+)/)[1];
    const mid = section.match(/^a=mid:(.*)$/m)[1].trim();
    mids.push(mid);
    const lines = [];
    if (kind === 'application') {
      lines.push(`m=application ${port} UDP/DTLS/SCTP webrtc-datachannel`);
    } else {
      const codec = kind === 'audio' ? 'opus/48000/2' : 'VP8/90000';
      const pt = section.match(new RegExp(`^a=rtpmap:(\\d+) ${codec}`, 'm'))[1];
      lines.push(`m=${kind} ${port} UDP/TLS/RTP/SAVPF ${pt}`);
      lines.push(`a=rtpmap:${pt} ${codec}`);
    }
    lines.push('c=IN IP4 127.0.0.1');
    lines.push(`a=candidate:1 1 udp 2130706431 127.0.0.1 ${port} typ host`);
    lines.push('a=end-of-candidates');
    lines.push(`a=mid:${mid}`);
    if (kind === 'application') {
      lines.push('a=sctp-port:5000');
    } else {
      lines.push('a=recvonly');
      lines.push('a=rtcp-mux');
    }
    media.push(...lines);
  }
  return [
    'v=0',
    'o=- 1 1 IN IP4 127.0.0.1',
    's=-',
    't=0 0',
    `a=group:BUNDLE ${mids.join(' ')}`,
    'a=ice-lite',
    `a=ice-ufrag:${ufrag}`,
    `a=ice-pwd:${pwd}`,
    `a=fingerprint:sha-256 ${fingerprint}`,
    'a=setup:passive',
    ...media,
    '',
  ].join('\r\n');
}

// Resolves with the first match of `re` in the child's stdout or stderr.
function waitForOutput(child, re, what, timeoutMs = 15000) {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`${what}: no ${re} in ${JSON.stringify(seen)}`)), timeoutMs);
    const onData = (chunk) => {
      seen += chunk.toString();
      const m = seen.match(re);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => reject(new Error(`${what} exited (${code}): ${seen}`)));
  });
}

function stop(child, signal = 'SIGTERM') {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill(signal);
  });
}

// Minimal pcap reader: UDP datagrams over IPv4/IPv6 on Ethernet, Linux cooked (SLL,
// SLL2) or raw-IP link types.
function readPcapUdp(file) {
  const buf = fs.readFileSync(file);
  const magic = buf.readUInt32LE(0);
  let le;
  let nanos = false;
  if (magic === 0xa1b2c3d4) le = true;
  else if (magic === 0xa1b23c4d) { le = true; nanos = true; }
  else if (buf.readUInt32BE(0) === 0xa1b2c3d4) le = false;
  else if (buf.readUInt32BE(0) === 0xa1b23c4d) { le = false; nanos = true; }
  else throw new Error(`${file}: not a pcap file`);
  const u32 = (o) => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));
  const linktype = u32(20) & 0x0fffffff;
  const out = [];
  let off = 24;
  let frame = 0;
  while (off + 16 <= buf.length) {
    const sec = u32(off);
    const frac = u32(off + 4);
    const caplen = u32(off + 8);
    const pkt = buf.subarray(off + 16, off + 16 + caplen);
    off += 16 + caplen;
    frame += 1;
    let p;
    let ethertype;
    if (linktype === 1) { ethertype = pkt.readUInt16BE(12); p = 14; }
    else if (linktype === 113) { ethertype = pkt.readUInt16BE(14); p = 16; }
    else if (linktype === 276) { ethertype = pkt.readUInt16BE(0); p = 20; }
    else if (linktype === 101) { ethertype = (pkt[0] >> 4) === 6 ? 0x86dd : 0x0800; p = 0; }
    else throw new Error(`${file}: unsupported link type ${linktype}`);
    let proto;
    let src;
    let dst;
    if (ethertype === 0x0800) {
      const ihl = (pkt[p] & 0x0f) * 4;
      proto = pkt[p + 9];
      src = Array.from(pkt.subarray(p + 12, p + 16)).join('.');
      dst = Array.from(pkt.subarray(p + 16, p + 20)).join('.');
      p += ihl;
    } else if (ethertype === 0x86dd) {
      proto = pkt[p + 6];
      src = `[${pkt.subarray(p + 8, p + 24).toString('hex')}]`;
      dst = `[${pkt.subarray(p + 24, p + 40).toString('hex')}]`;
      p += 40;
    } else {
      continue;
    }
    if (proto !== 17) continue;
    const sport = pkt.readUInt16BE(p);
    const dport = pkt.readUInt16BE(p + 2);
    const ulen = pkt.readUInt16BE(p + 4);
    out.push({
      frame,
      time: sec + frac / (nanos ? 1e9 : 1e6),
      src: `${src}:${sport}`,
      dst: `${dst}:${dport}`,
      sport,
      dport,
      payload: Buffer.from(pkt.subarray(p + 8, p + ulen)),
    });
  }
  return out;
}

// The DTLS records of one datagram, with the handshake header of each handshake record.
function dtlsRecords(payload) {
  const records = [];
  let o = 0;
  while (o + 13 <= payload.length) {
    const type = payload[o];
    const length = payload.readUInt16BE(o + 11);
    const rec = {
      type,
      version: payload.readUInt16BE(o + 1),
      epoch: payload.readUInt16BE(o + 3),
      seq: payload.readUIntBE(o + 5, 6),
      length,
    };
    if (type === 22 && rec.epoch === 0 && length >= 12) {
      const h = payload.subarray(o + 13);
      rec.hs = {
        msgType: h[0],
        length: h.readUIntBE(1, 3),
        messageSeq: h.readUInt16BE(4),
        fragmentOffset: h.readUIntBE(6, 3),
        fragmentLength: h.readUIntBE(9, 3),
      };
    }
    records.push(rec);
    o += 13 + length;
  }
  if (o !== payload.length) throw new Error(`datagram of ${payload.length} bytes is not whole DTLS records`);
  return records;
}

// The datagrams of the first transmission of the ClientHello flight: from the first DTLS
// datagram Chromium sent, until its fragments cover the whole ClientHello once.
function firstClientHelloFlight(datagrams, port) {
  const dtls = datagrams.filter((d) => d.dport === port && d.payload.length > 0
    && d.payload[0] >= 20 && d.payload[0] <= 63);
  if (dtls.length === 0) throw new Error('Chromium sent no DTLS datagram');
  const flight = [];
  const covered = [];
  let total = null;
  let messageSeq = null;
  for (const d of dtls) {
    const recs = dtlsRecords(d.payload);
    for (const r of recs) {
      if (!r.hs || r.hs.msgType !== 1) throw new Error(`frame ${d.frame}: not a ClientHello record`);
      if (total === null) { total = r.hs.length; messageSeq = r.hs.messageSeq; }
      if (r.hs.length !== total || r.hs.messageSeq !== messageSeq) {
        throw new Error(`frame ${d.frame}: a different ClientHello before the first was whole`);
      }
      for (const [a, b] of covered) {
        if (r.hs.fragmentOffset < b && a < r.hs.fragmentOffset + r.hs.fragmentLength) {
          throw new Error(`frame ${d.frame}: fragment overlaps an earlier one (a retransmission?)`);
        }
      }
      covered.push([r.hs.fragmentOffset, r.hs.fragmentOffset + r.hs.fragmentLength]);
    }
    flight.push({ ...d, records: recs });
    const sum = covered.reduce((s, [a, b]) => s + (b - a), 0);
    if (sum === total) break;
  }
  const sum = covered.reduce((s, [a, b]) => s + (b - a), 0);
  if (sum !== total) throw new Error(`the ClientHello's fragments cover ${sum} of ${total} bytes`);
  return { flight, dtls, total, messageSeq };
}

function serve() {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(PAGE);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function captureRun(run, url, workDir) {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'shoal-chromium-'));
  const pcap = path.join(workDir, `run${run}.pcap`);
  let shoal;
  let tcpdump;
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: EXECUTABLE,
    headless: true,
    ignoreDefaultArgs: ['--mute-audio'],
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--use-fake-device-for-media-stream',
      '--use-fake-ui-for-media-stream',
      '--allow-loopback-in-peer-connection',
      '--disable-features=WebRtcHideLocalIpsWithMdns',
    ],
  });
  try {
    const browserVersion = context.browser() ? context.browser().version() : null;
    const page = context.pages()[0] || (await context.newPage());
    await page.goto(url);
    const userAgent = await page.evaluate(() => navigator.userAgent);
    const offer = await page.evaluate(() => makeOffer());
    const remoteUfrag = sdpAttr(offer, 'ice-ufrag');
    const remotePwd = sdpAttr(offer, 'ice-pwd');
    const localUfrag = iceString(8);
    const localPwd = iceString(24);
    const fingerprint = Array.from(crypto.randomBytes(32), (b) => b.toString(16).padStart(2, '0').toUpperCase()).join(':');

    const shoalArgs = ['--shards', '1', '--udp-port-base', '0', '--static-peer',
      `${localUfrag}:${localPwd}:${remoteUfrag}:${remotePwd}`];
    shoal = spawn(SHOAL, shoalArgs, { stdio: ['ignore', 'pipe', 'pipe'] });
    let shoalLog = '';
    shoal.stdout.on('data', (c) => { shoalLog += c; });
    shoal.stderr.on('data', (c) => { shoalLog += c; });
    const port = Number((await waitForOutput(shoal, /shard 0 udp 127\.0\.0\.1:(\d+)/, 'shoal'))[1]);

    tcpdump = spawn('tcpdump', ['-i', 'lo', '-U', '-n', '-Z', 'root', '-w', pcap, 'udp', 'port', String(port)],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    await waitForOutput(tcpdump, /listening on/, 'tcpdump');

    const answer = buildAnswer(offer, port, localUfrag, localPwd, fingerprint);
    const ice = await page.evaluate((a) => connect(a), answer);
    await sleep(LINGER_MS);
    const finalStates = await page.evaluate(() => states());
    await sleep(200);
    await stop(tcpdump);
    await stop(shoal, 'SIGINT');
    return {
      run, pcap, port, userAgent, browserVersion, offer, answer, ice, finalStates,
      shoalCommand: [path.relative(REPO, SHOAL), ...shoalArgs].join(' '), shoalLog,
    };
  } finally {
    if (tcpdump) await stop(tcpdump);
    if (shoal) await stop(shoal, 'SIGKILL');
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

function describeFlight(result, flight, dtls) {
  const lines = [];
  const t0 = dtls[0].time;
  for (const d of dtls) {
    const recs = dtlsRecords(d.payload).map((r) => (r.hs
      ? `rec seq ${r.seq} msg_seq ${r.hs.messageSeq} frag ${r.hs.fragmentOffset}+${r.hs.fragmentLength}/${r.hs.length}`
      : `rec type ${r.type} seq ${r.seq}`));
    const first = flight.some((f) => f.frame === d.frame) ? ' (first transmission, saved)' : '';
    lines.push(`  frame ${d.frame} +${(d.time - t0).toFixed(3)}s ${d.src} -> ${d.dst} ${d.payload.length} B: ${recs.join('; ')}${first}`);
  }
  return lines.join('\n');
}

async function main() {
  const chromiumVersion = execFileSync(EXECUTABLE, ['--version'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
  const major = (chromiumVersion.match(/(\d+)\.\d+\.\d+\.\d+/) || [])[1];
  if (!major) throw new Error(`cannot read a version in ${JSON.stringify(chromiumVersion)}`);
  const tsharkVersion = execFileSync('tshark', ['--version']).toString().split('\n')[0];
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'shoal-capture-dtls-'));
  const server = await serve();
  const url = `http://127.0.0.1:${server.address().port}/`;
  const summary = [];
  fs.mkdirSync(OUT_DIR, { recursive: true });
  console.log(`chromium: ${chromiumVersion}`);
  console.log(`pcap files in ${workDir}`);
  try {
    for (let run = 1; run <= RUNS; run += 1) {
      const r = await captureRun(run, url, workDir);
      console.log(`run ${run}: shoal port ${r.port}, ICE ${r.ice}, then ${JSON.stringify(r.finalStates)}`);
      const datagrams = readPcapUdp(r.pcap);
      const { flight, dtls, total, messageSeq } = firstClientHelloFlight(datagrams, r.port);
      const stem = `chromium${major}_client_hello${run === 1 ? '' : `_run${run}`}`;
      flight.forEach((d, i) => {
        const out = path.join(OUT_DIR, `${stem}_${i + 1}.bin`);
        fs.writeFileSync(out, d.payload);
        console.log(`wrote ${out} (${d.payload.length} bytes, frame ${d.frame})`);
      });
      const frames = flight.map((d) => d.frame).join(',');
      const decode = execFileSync('tshark', ['-r', r.pcap, '-2', '-V',
        '-d', `udp.port==${r.port},dtls`, '-Y', `frame.number in {${frames}}`],
      { maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'ignore'] }).toString();
      summary.push([
        `==== run ${run}: ${stem}_{${flight.map((_, i) => i + 1).join(',')}}.bin ====`,
        `user agent: ${r.userAgent}`,
        `shoal: ${r.shoalCommand}`,
        `shoal udp port ${r.port}; ICE ${r.ice}; after ${LINGER_MS} ms: ${JSON.stringify(r.finalStates)}`,
        `shoal output: ${JSON.stringify(r.shoalLog.trim())}`,
        `ClientHello: message_seq ${messageSeq}, ${total} bytes of body, in ${flight.length} datagrams ` +
          `(${flight.map((d) => d.payload.length).join(' + ')} bytes of UDP payload)`,
        'DTLS datagrams Chromium sent to shoal (retransmissions included):',
        describeFlight(r, flight, dtls),
        '',
        `tshark -r run${run}.pcap -2 -V -d udp.port==${r.port},dtls -Y 'frame.number in {${frames}}'`,
        '',
        decode.trimEnd(),
        '',
      ].join('\n'));
    }
  } finally {
    server.close();
  }
  const txt = path.join(OUT_DIR, `chromium${major}_client_hello.txt`);
  fs.writeFileSync(txt, [
    `# DTLS ClientHello datagrams from ${chromiumVersion}`,
    `# captured ${new Date().toISOString()} by scripts/capture-dtls/capture-chromium.js; decoded by ${tsharkVersion}`,
    '',
    ...summary,
  ].join('\n'));
  console.log(`wrote ${txt}`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
