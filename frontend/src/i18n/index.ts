// The console's languages: English and Korean, every string from the
// catalogues beside this file. The language is the user's choice (kept on
// their account and in this browser), else the browser's; the document's
// `lang`, numbers, money and dates follow it.
import i18n from "i18next";
import { initReactI18next } from "react-i18next";
import en from "./en.json";
import ko from "./ko.json";
import { preferences, setPreferences } from "../lib/preferences";

export const LANGUAGES = { en: "English", ko: "한국어" } as const;
export type Language = keyof typeof LANGUAGES;

export function isLanguage(value: unknown): value is Language {
  return typeof value === "string" && value in LANGUAGES;
}

/** The browser's language when the console speaks it, else English. */
function browserLanguage(): Language {
  const wanted = globalThis.navigator?.languages ?? [];
  for (const tag of wanted) {
    const base = tag.toLowerCase().split("-")[0];
    if (isLanguage(base)) return base;
  }
  return "en";
}

void i18n.use(initReactI18next).init({
  resources: { en: { translation: en }, ko: { translation: ko } },
  lng: preferences().locale ?? browserLanguage(),
  fallbackLng: "en",
  interpolation: { escapeValue: false },
  returnNull: false,
});

function follow(language: string) {
  if (globalThis.document) document.documentElement.lang = language;
}
follow(i18n.language);
i18n.on("languageChanged", follow);

/** Speaks `language` from now on, remembered in this browser. */
export function chooseLanguage(language: Language) {
  setPreferences({ locale: language });
  void i18n.changeLanguage(language);
}

export { i18n };
export const t = i18n.t.bind(i18n);
