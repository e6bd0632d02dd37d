// pages/login.js: /login, the sign-in form.
import {html, useState} from '../vendor/preact-htm.js';
import * as api from '../api.js';
import {t} from '../i18n.js';
import {Header, Problem} from '../ui.js';

export default function Login() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    const field = e.target.elements.token;
    setBusy(true); setError(null);
    try {
      await api.signIn(field.value);
      field.value = '';
      location.assign('/');
    } catch (err) {
      setError(err); setBusy(false); field.focus();
    }
  };
  return html`<${Header} />
  <main id="main" tabindex="-1" class="narrow">
    <h1>${t('loginTitle')}</h1>
    <form method="post" action="/v1/session" onSubmit=${submit} class="card">
      <label for="token">${t('token')}</label>
      <input id="token" name="token" type="password" required autocomplete="off" spellcheck="false"
        aria-describedby="token-hint" autofocus />
      <p id="token-hint" class="hint">${t('tokenHint')}</p>
      <${Problem} error=${error} />
      <button type="submit" disabled=${busy}>${busy ? t('signingIn') : t('signIn')}</button>
    </form>
  </main>`;
}
