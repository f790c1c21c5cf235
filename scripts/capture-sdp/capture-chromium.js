// Captures real SDP offers from headless Chromium for shoal's SDP fixtures.
//
// Usage: node capture-chromium.js [OUT_DIR]
// OUT_DIR defaults to components/tests/fixtures/sdp in the repository.
// Chromium is the Debian package at /usr/bin/chromium (override with CHROMIUM=...).
//
// Each offer comes from a fresh RTCPeerConnection in a page served from 127.0.0.1
// (a secure context, so getUserMedia works with the fake devices). The script waits
// for ICE gathering to complete and writes localDescription.sdp byte for byte.

'use strict';

const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const EXECUTABLE = process.env.CHROMIUM || '/usr/bin/chromium';
const OUT_DIR = path.resolve(
  process.argv[2] || path.join(__dirname, '..', '..', 'components', 'tests', 'fixtures', 'sdp'),
);
const GATHER_TIMEOUT_MS = 15000;

const PAGE = `<!doctype html><meta charset="utf-8"><title>shoal sdp capture</title>
<script>
async function gathered(pc) {
  if (pc.iceGatheringState === 'complete') return;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('ICE gathering timed out')), ${GATHER_TIMEOUT_MS});
    pc.addEventListener('icegatheringstatechange', () => {
      if (pc.iceGatheringState === 'complete') { clearTimeout(timer); resolve(); }
    });
  });
}

// kind: 'av_data' | 'data' | 'simulcast'
async function captureOffer(kind) {
  const pc = new RTCPeerConnection();
  if (kind === 'av_data' || kind === 'simulcast') {
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: true,
      video: { width: 1280, height: 720 },
    });
    const [audio] = stream.getAudioTracks();
    const [video] = stream.getVideoTracks();
    pc.addTrack(audio, stream);
    if (kind === 'simulcast') {
      pc.addTransceiver(video, {
        direction: 'sendonly',
        streams: [stream],
        sendEncodings: [
          { rid: 'q', scaleResolutionDownBy: 4.0 },
          { rid: 'h', scaleResolutionDownBy: 2.0 },
          { rid: 'f' },
        ],
      });
    } else {
      pc.addTrack(video, stream);
    }
  }
  if (kind === 'av_data' || kind === 'data') {
    pc.createDataChannel('shoal');
  }
  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  await gathered(pc);
  const sdp = pc.localDescription.sdp;
  pc.close();
  return sdp;
}
</script>`;

const CAPTURES = [
  { kind: 'av_data', file: 'chromium156_av_data_offer.sdp' },
  { kind: 'data', file: 'chromium156_data_offer.sdp' },
  { kind: 'simulcast', file: 'chromium156_simulcast_offer.sdp' },
];

function serve() {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(PAGE);
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

async function main() {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'shoal-chromium-'));
  const server = await serve();
  const url = `http://127.0.0.1:${server.address().port}/`;
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
    const page = context.pages()[0] || (await context.newPage());
    await page.goto(url);
    const version = await page.evaluate(() => navigator.userAgent);
    console.log(`user agent: ${version}`);
    fs.mkdirSync(OUT_DIR, { recursive: true });
    for (const { kind, file } of CAPTURES) {
      const sdp = await page.evaluate((k) => captureOffer(k), kind);
      const out = path.join(OUT_DIR, file);
      fs.writeFileSync(out, sdp, { encoding: 'utf8' });
      console.log(`wrote ${out} (${Buffer.byteLength(sdp)} bytes)`);
    }
  } finally {
    await context.close();
    server.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
