// gpuvm's browser console: noVNC on gpuvmd's websocket proxy. The page was
// opened with a one-time ticket; the websocket spends it, so the page drops
// it from the address bar at once (a reload needs a new link).
import RFB from '../novnc/core/rfb.js';

const root = document.getElementById('console');
const status = document.getElementById('status');
const cad = document.getElementById('cad');
const params = root.dataset;

function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
    document.title = `${params.name} (${state}) — gpuvm console`;
}

const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
const url = `${scheme}//${location.host}${params.ws}?vm=${encodeURIComponent(params.vm)}&ticket=${encodeURIComponent(params.ticket)}`;
history.replaceState(null, '', location.pathname);

// The page makes the websocket itself, to read why the server closed it
// (idle, time limit, VM stopped); noVNC does not say.
const ws = new WebSocket(url, ['binary']);
let closed = '';
ws.addEventListener('close', (e) => {
    closed = e.reason || (e.code === 1006 ? 'the connection was lost, or gpuvmd refused the ticket (it works once, for a minute)' : `code ${e.code}`);
});

setStatus('connecting', 'connecting…');
const rfb = new RFB(document.getElementById('screen'), ws, { shared: true });
rfb.scaleViewport = true;
rfb.background = '#1e1e1e';
rfb.addEventListener('connect', () => {
    setStatus('connected', 'connected');
    cad.disabled = false;
    rfb.focus();
});
rfb.addEventListener('disconnect', (e) => {
    cad.disabled = true;
    const why = closed || (e.detail.clean ? 'the display closed the connection' : 'the connection failed');
    setStatus('disconnected', `disconnected: ${why}. Run 'gpuvm console ${params.name}' for a new link.`);
});
rfb.addEventListener('securityfailure', (e) => {
    setStatus('failed', `the display refused the connection: ${e.detail.reason || 'security failure'}`);
});
rfb.addEventListener('credentialsrequired', () => {
    setStatus('failed', 'the display asked for credentials, which gpuvmd should have given: report this to your admin');
    rfb.disconnect();
});
rfb.addEventListener('desktopname', (e) => {
    root.dataset.desktop = e.detail.name;
});
cad.addEventListener('click', () => rfb.sendCtrlAltDel());
document.getElementById('fullscreen').addEventListener('click', () => {
    document.documentElement.requestFullscreen?.();
});
