// pages/login.js: /login, the sign-in page. It offers the ways the server
// has (GET /v1/auth/methods): the OpenID provider's button (a plain link to
// /v1/auth/oidc/start: gpuvmd's callback sets the session cookie and comes
// back here signed in), the directory's username and password, and an API
// token. Every way ends in the portal's HttpOnly cookie session: no token
// is kept by this page, nor ever put in a URL.
import {html, useState, useEffect} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t, addWords, setContact} from '../i18n.js';
import {Header, Problem} from '../ui.js';

addWords({
  en: {
    loginSSO: 'Sign in with {name}',
    loginSSOFailed: 'The sign-in with {name} failed. Try again, or ask your admin{admin} whether your account may use gpuvm.',
    loginPasswordTitle: 'Directory account',
    loginTokenTitle: 'With an API token',
    loginUsername: 'Username',
    loginPassword: 'Password',
    loginOr: 'or',
    loginLoading: 'Finding the ways to sign in…',
    loginNone: 'This server offers no way to sign in from the portal. Ask your admin{admin}.',
  },
  'zh-CN': {
    loginSSO: '使用 {name} 登录',
    loginSSOFailed: '使用 {name} 登录失败。请重试，或询问管理员{admin}你的账户能否使用 gpuvm。',
    loginPasswordTitle: '目录账户',
    loginTokenTitle: '使用 API 令牌',
    loginUsername: '用户名',
    loginPassword: '密码',
    loginOr: '或',
    loginLoading: '正在查找登录方式…',
    loginNone: '此服务器未提供门户登录方式。请联系管理员{admin}。',
  },
});

// done leaves the sign-in page for the portal.
// next is where the visitor was going when the portal sent them here
// (/login?next=PATH): a page of this origin only, else the catalogue. It is
// read as the browser reads a URL (new URL drops tabs and newlines, takes
// "\\" for "/", knows "https:host" and "javascript:"), so that what is
// checked is where location.assign would go; and it is kept as the path
// the URL parser wrote, which cannot begin "//" (another host) below.
const next = (() => {
  const n = new URLSearchParams(location.search).get('next') || '/';
  let u;
  try { u = new URL(n, location.origin); } catch { return '/'; }
  const path = u.pathname + u.search + u.hash;
  return u.origin === location.origin && !path.startsWith('//') && !u.pathname.startsWith('/login') ? path : '/';
})();
const done = () => location.assign(next);
// The OpenID sign-in's return_to: the path and query (the server takes no
// fragment).
const returnTo = next.split('#')[0];

function PasswordForm() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    setBusy(true); setError(null);
    try {
      await api.signInPassword(f.username.value, f.password.value);
      f.password.value = '';
      done();
    } catch (err) {
      f.password.value = '';
      setError(err); setBusy(false); f.password.focus();
    }
  };
  return html`<form method="post" action="/v1/session" onSubmit=${submit} class="card login-way" id="password-form"
      aria-labelledby="password-title">
    <h2 id="password-title">${t('loginPasswordTitle')}</h2>
    <label for="username">${t('loginUsername')}</label>
    <input id="username" name="username" type="text" required autocomplete="username" spellcheck="false"
      autocapitalize="none" maxlength="256" />
    <label for="password">${t('loginPassword')}</label>
    <input id="password" name="password" type="password" required autocomplete="current-password" maxlength="1024" />
    <${Problem} error=${error} />
    <button type="submit" disabled=${busy}>${busy ? t('signingIn') : t('signIn')}</button>
  </form>`;
}

function TokenForm() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    const field = e.target.elements.token;
    setBusy(true); setError(null);
    try {
      await api.signIn(field.value);
      field.value = '';
      done();
    } catch (err) {
      setError(err); setBusy(false); field.focus();
    }
  };
  return html`<form method="post" action="/v1/session" onSubmit=${submit} class="card login-way" id="token-form"
      aria-labelledby="token-title">
    <h2 id="token-title">${t('loginTokenTitle')}</h2>
    <label for="token">${t('token')}</label>
    <input id="token" name="token" type="password" required autocomplete="off" spellcheck="false"
      aria-describedby="token-hint" />
    <p id="token-hint" class="hint">${t('tokenHint')}</p>
    <${Problem} error=${error} />
    <button type="submit" disabled=${busy}>${busy ? t('signingIn') : t('signIn')}</button>
  </form>`;
}

export default function Login() {
  const [methods, setMethods] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    api.authMethods().then((m) => { setContact(m.contact); setMethods(m); }, (err) => {
      // Without the answer, offer the token, which every server takes
      // from break-glass admins at least.
      setError(err); setMethods({token: true});
    });
  }, []);
  const ssoFailed = new URLSearchParams(location.search).get('sso') === 'failed';
  const ways = [];
  if (methods && methods.oidc) {
    ways.push(html`<div class="card login-way">
      ${ssoFailed && html`<p class="notice error" role="alert">${t('loginSSOFailed', {name: methods.oidc_name})}</p>`}
      <a class="button sso" id="sso" href=${'/v1/auth/oidc/start?return_to=' + encodeURIComponent(returnTo)}>${t('loginSSO', {name: methods.oidc_name})}</a>
    </div>`);
  }
  if (methods && methods.password) ways.push(html`<${PasswordForm} />`);
  if (methods && methods.token) ways.push(html`<${TokenForm} />`);
  return html`<${Header} simulated=${!!(methods && methods.simulated)} />
  <main id="main" tabindex="-1" class="narrow login">
    <h1>${t('loginTitle')}</h1>
    <${Problem} error=${error} />
    ${!methods && html`<p class="hint" aria-live="polite">${t('loginLoading')}</p>`}
    ${methods && ways.length === 0 && html`<p class="notice">${t('loginNone')}</p>`}
    ${ways.map((w, i) => html`${i > 0 && html`<p class="login-or" aria-hidden="true">${t('loginOr')}</p>`}${w}`)}
  </main>`;
}
